"""An evaluation job (oodcorr.jobs.evaluate): the checkpoints it scores or refuses, the predictions it
writes or reuses, and what it records. Batching and the forward pass: tests/jobs/test_scoring.py."""

import json
import re
import types
from pathlib import Path

import pandas as pd
import pytest
import torch

from oodcorr.core.model_entry import ModelEntry
from oodcorr.modeling import synthetic

from helpers import (
    BINARY,
    LABELS,
    PROMPT,
    Wildcards,
    checkpoint_series,
    run_rule_script,
    synthetic_testset,
    tokenised_testset,
    truncated_json,
)


def test_a_job_records_its_padding_and_when_it_first_scored(tmp_path, tiny_models):
    """Each record says how much of its batches was padding (what the CPU rule cut them for), and
    the job's timing says how long after its process started it began scoring and had its first
    batch scored; a bfloat16 evaluation is recorded (and keyed) as one."""
    from oodcorr.jobs.evaluate import EvalParams, evaluate_run

    tiny = str(tiny_models["olmo2"])
    spec = {"name": "tiny", "tiny": {"model_type": "olmo2"}}
    data, meta, cache = synthetic_testset(tmp_path, tiny, spec, "distractor", 40, 5)
    ck = checkpoint_series(tmp_path, tiny, spec, False, LABELS, n_ckpt=1)[0]
    recs = {}
    for dtype in (None, "bfloat16"):
        recs[dtype] = evaluate_run(
            EvalParams(dict(spec, dtype="float32"), tiny, {"run_id": "r"}, dtype),
            checkpoints=[dict(ck, predictions=str(tmp_path / f"{dtype}.parquet"))],
            tokenized=str(cache),
            batch_size=32,
            max_tokens=16384,
        )
    rec, timing = recs[None]["checkpoints"][0], recs[None]["timing_s"]
    b = rec["batching"]
    assert b["padding"] == round(1 - b["tokens"] / b["padded_tokens"], 4) and 0 <= b["padding"] < 0.1
    assert b["max_tokens"] == 512 and b["overhead"] == 32.0  # one thread on a CPU
    assert rec["loader"] == "lean" and rec["lora"] is None and rec["dtype"] == "float32"
    assert 0 < timing["startup"] < timing["ready"] <= timing["first_batch"]
    half = recs["bfloat16"]["checkpoints"][0]
    assert half["dtype"] == "bfloat16" and half["eval_key"] != rec["eval_key"]


def test_a_job_keeps_the_halved_batch_for_its_later_checkpoints(tmp_path, tiny_models, monkeypatch):
    """evaluate_run over two checkpoints: the first runs out of memory twice (16 -> 8 -> 4),
    the second starts at 4 and never does; both score like an unconstrained run. (Batches as
    full as the bounds allow, as on a GPU: a CPU's own cuts would start below 16 rows.)"""

    from oodcorr.jobs import evaluate

    monkeypatch.setattr(evaluate, "device_batching", lambda device, threads, rows, tokens: (rows, tokens, None))

    from oodcorr.core.atomic_write import write_jsonl_atomic
    from oodcorr.core.records import read_result
    from oodcorr.jobs.checkpoints import write_ckpt_manifest
    from oodcorr.jobs.evaluate import EvalParams, evaluate_run
    from oodcorr.jobs.prepare_dataset import prepare
    from oodcorr.modeling.loading import load_model

    tiny = str(tiny_models["opt"])
    spec = {"name": "tiny", "tiny": {"model_type": "opt"}}
    raw = tmp_path / "raw.jsonl"
    write_jsonl_atomic(raw, synthetic.generate("negation", 40, 3))
    recs, prov = prepare("neg", {"source": "local", "path": str(raw)}, BINARY)
    data, meta, cache = tokenised_testset(tmp_path, tiny, spec, recs, prov)
    cks = []
    for step in (0, 5):
        ck = tmp_path / "run" / "checkpoints" / f"checkpoint-{step}"
        load_model(ModelEntry.from_params(spec), tiny).save_pretrained(ck)
        write_ckpt_manifest(ck, step, resumable=False)
        cks.append({"step": step, "checkpoint": str(ck), "predictions": str(tmp_path / f"p{step}.parquet")})

    def run(name):
        out = [dict(c, predictions=str(tmp_path / f"{name}{c['step']}.parquet")) for c in cks]
        return evaluate_run(
            EvalParams(spec, tiny, {"run_id": "r"}),
            checkpoints=out,
            tokenized=str(cache),
            batch_size=16,
            max_tokens=10**6,
            out_summary=str(tmp_path / f"{name}.json"),
        )

    free = run("free")

    def oom_above_4(module, args):
        if isinstance(module, torch.nn.Embedding) and args and args[0].dim() == 2 and args[0].shape[0] > 4:
            raise torch.OutOfMemoryError(f"simulated: {args[0].shape[0]} rows")

    handle = torch.nn.modules.module.register_module_forward_pre_hook(oom_above_4)
    try:
        tight = run("tight")
    finally:
        handle.remove()
    first, second = tight["checkpoints"]
    assert (first["batching"]["n_oom"], first["batching"]["batch_size"]) == (2, 4)
    assert (second["batching"]["n_oom"], second["batching"]["batch_size"]) == (0, 4)
    assert free["checkpoints"][1]["batching"]["batch_size"] == 16
    for a, b in zip(free["checkpoints"], tight["checkpoints"], strict=True):
        assert (a["step"], a["n_correct"], a["pred_counts"]) == (b["step"], b["n_correct"], b["pred_counts"])
        assert read_result(b["predictions"])["batching"] == b["batching"]
    assert json.loads((tmp_path / "tight.json").read_text())["steps"] == [0, 5]


@pytest.mark.parametrize(
    "kind, method, lora",
    [("opt", "pattern", False), ("opt", "pattern", True), ("olmo2", "pattern", True), ("opt", "head", True)],
)
def test_both_evaluation_units_write_identical_predictions(tmp_path, tiny_models, kind, method, lora):
    """Unit `run` (one process: the model loaded once, each checkpoint's weights or adapter
    swapped in) and unit `checkpoint` (a fresh load per checkpoint) write the same files:
    every prediction and logit bit for bit, and the same scores."""

    from oodcorr.core.atomic_write import write_json_atomic, write_jsonl_atomic
    from oodcorr.core.records import read_result
    from oodcorr.jobs.evaluate import EvalParams, evaluate_run
    from oodcorr.jobs.tokenize_testset import tokenize_testset

    tiny = str(tiny_models[kind])
    spec = {"name": "tiny", "tiny": {"model_type": kind}, "method": method}
    data, meta = tmp_path / "neg.jsonl", tmp_path / "neg.meta.json"
    write_jsonl_atomic(
        data,
        [
            dict(r, label="entailment" if r["label"] == "entailment" else "non-entailment")
            for r in synthetic.generate("negation", 40, 3)
        ],
    )
    write_json_atomic(meta, {"fingerprint": "f", "records_sha256": "r"})
    cache = tmp_path / "neg.pt"
    tokenize_testset(
        model_spec=spec,
        built_model_dir=tiny,
        testset="neg",
        data_path=str(data),
        data_meta=str(meta),
        labels=LABELS,
        prompt=PROMPT if method == "pattern" else None,
        max_length=128,
        out_path=str(cache),
    )
    cks = checkpoint_series(tmp_path, tiny, spec, lora, LABELS)
    common = dict(
        job=EvalParams(spec, tiny, {"run_id": "r"}),
        tokenized=str(cache),
        batch_size=8,
        max_tokens=10**6,
    )
    one_job = evaluate_run(
        checkpoints=[dict(c, predictions=str(tmp_path / f"run{c['step']}.parquet")) for c in cks],
        out_summary=str(tmp_path / "summary.json"),
        **common,
    )
    assert [r["load"] for r in one_job["checkpoints"]] == ["fresh"] + ["adapter swap" if lora else "in place"] * (
        len(cks) - 1
    )
    per_ckpt = [
        evaluate_run(checkpoints=[dict(c, predictions=str(tmp_path / f"ck{c['step']}.parquet"))], **common) for c in cks
    ]
    assert all(r["checkpoints"][0]["load"] == "fresh" for r in per_ckpt)
    accuracies = set()
    for c in cks:
        a, b = (pd.read_parquet(tmp_path / f"{u}{c['step']}.parquet") for u in ("run", "ck"))
        pd.testing.assert_frame_equal(a, b)  # predictions and float32 logits, exactly
        ra, rb = read_result(tmp_path / f"run{c['step']}.parquet"), read_result(tmp_path / f"ck{c['step']}.parquet")
        assert ra["eval_key"] == rb["eval_key"] and ra["n_correct"] == rb["n_correct"]
        accuracies.add(tuple(a["logit_entailment"].round(4)))
    assert len(accuracies) == len(cks)  # the checkpoints really differ: a swap that did nothing would fail


def test_a_run_job_keeps_predictions_made_by_exactly_this_evaluation(tmp_path, tiny_models):
    """Resuming (or switching units): a predictions file whose record has this evaluation's key is
    kept; one made from other weights is computed again."""
    import os

    from oodcorr.jobs.checkpoints import write_ckpt_manifest
    from oodcorr.jobs.evaluate import EvalParams, evaluate_run
    from oodcorr.modeling.loading import load_model

    tiny = str(tiny_models["opt"])
    spec = {"name": "tiny", "tiny": {"model_type": "opt"}}
    data, meta, cache = synthetic_testset(tmp_path, tiny, spec, "negation", 20, 3)
    cks = checkpoint_series(tmp_path, tiny, spec, False, LABELS, n_ckpt=2)
    cks = [dict(c, predictions=str(tmp_path / f"p{c['step']}.parquet")) for c in cks]
    common = dict(
        job=EvalParams(spec, tiny, {"run_id": "r"}),
        checkpoints=cks,
        tokenized=str(cache),
        batch_size=8,
        max_tokens=10**6,
    )
    first = evaluate_run(**common)
    mtimes = [os.stat(c["predictions"]).st_mtime_ns for c in cks]
    again = evaluate_run(**common)
    assert [os.stat(c["predictions"]).st_mtime_ns for c in cks] == mtimes  # nothing rewritten
    assert [r["accuracy"] for r in again["checkpoints"]] == [r["accuracy"] for r in first["checkpoints"]]
    # checkpoint 10 is retrained (other weights): its predictions are computed again
    model = load_model(ModelEntry.from_params(spec), tiny)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(0.5)
    model.save_pretrained(cks[1]["checkpoint"])
    write_ckpt_manifest(__import__("pathlib").Path(cks[1]["checkpoint"]), 10, resumable=False)
    evaluate_run(**common)
    after = [os.stat(c["predictions"]).st_mtime_ns for c in cks]
    assert after[0] == mtimes[0] and after[1] != mtimes[1]


def _one_testset(tmp_path, tiny, spec):

    data, meta, cache = synthetic_testset(tmp_path, tiny, spec, "negation", 20, 3)
    return str(cache)


@pytest.mark.parametrize("unit", ["checkpoint", "run"])
def test_a_checkpoint_whose_bytes_changed_is_refused(tmp_path, tiny_models, unit):
    """Same size, same modification time, other bytes: the sha256 check (cached per file by its
    stat, which any write changes) refuses it, naming the checkpoint and the way out; nothing
    is written for it. (Before: sizes only, so it was evaluated.)"""
    import os

    from oodcorr.jobs.evaluate import EvalParams, EvaluationRefused, evaluate_run

    tiny = str(tiny_models["opt"])
    spec = {"name": "tiny", "tiny": {"model_type": "opt"}}
    cache = _one_testset(tmp_path, tiny, spec)
    cks = [
        dict(c, predictions=str(tmp_path / f"p{c['step']}.parquet"))
        for c in checkpoint_series(tmp_path, tiny, spec, False, LABELS, n_ckpt=2)
    ]
    weights = tmp_path / "run/checkpoints/checkpoint-10/model.safetensors"
    st = os.stat(weights)
    raw = bytearray(weights.read_bytes())
    raw[-100] ^= 0xFF
    weights.write_bytes(bytes(raw))
    os.utime(weights, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert os.stat(weights).st_size == st.st_size
    todo = cks if unit == "run" else cks[1:]
    with pytest.raises(EvaluationRefused) as e:
        evaluate_run(
            EvalParams(spec, tiny, {"run_id": "r"}),
            checkpoints=todo,
            tokenized=cache,
            batch_size=8,
            max_tokens=10**6,
            out_summary=str(tmp_path / "s.json") if unit == "run" else None,
        )
    msg = str(e.value)
    assert "checkpoint-10" in msg and "model.safetensors" in msg and "manifest.json" in msg
    assert not os.path.exists(cks[1]["predictions"]) and not os.path.exists(tmp_path / "s.json")


@pytest.mark.parametrize("unit", ["checkpoint", "run"])
def test_nan_logits_give_no_score(tmp_path, tiny_models, unit):
    """A checkpoint whose weights are NaN: argmax would still name a class (an accuracy near
    0.5); the evaluation stops with the checkpoint and the cause, and writes no predictions."""
    import os

    from oodcorr.jobs.checkpoints import write_ckpt_manifest
    from oodcorr.jobs.evaluate import EvalParams, EvaluationRefused, evaluate_run
    from oodcorr.modeling.loading import load_model

    tiny = str(tiny_models["opt"])
    spec = {"name": "tiny", "tiny": {"model_type": "opt"}}
    cache = _one_testset(tmp_path, tiny, spec)
    cks = [
        dict(c, predictions=str(tmp_path / f"p{c['step']}.parquet"))
        for c in checkpoint_series(tmp_path, tiny, spec, False, LABELS, n_ckpt=2)
    ]
    model = load_model(ModelEntry.from_params(spec), tiny)
    with torch.no_grad():
        for p in model.parameters():
            p.fill_(float("nan"))
    model.save_pretrained(cks[1]["checkpoint"])
    write_ckpt_manifest(__import__("pathlib").Path(cks[1]["checkpoint"]), 10, resumable=False)
    todo = cks if unit == "run" else cks[1:]
    with pytest.raises(EvaluationRefused) as e:
        evaluate_run(
            EvalParams(spec, tiny, {"run_id": "r"}),
            checkpoints=todo,
            tokenized=cache,
            batch_size=8,
            max_tokens=10**6,
            out_summary=str(tmp_path / "s.json") if unit == "run" else None,
        )
    msg = str(e.value)
    assert "checkpoint-10" in msg and "not finite" in msg and "20 of 20" in msg and "learning_rate" in msg
    assert not os.path.exists(cks[1]["predictions"])


def test_non_finite_scores_from_finite_weights_point_at_the_dtype():
    from oodcorr.jobs.evaluate import EvaluationRefused, check_finite

    model = torch.nn.Linear(2, 2)
    ok = torch.zeros(3, 2)
    check_finite(ok, model, checkpoint="ck", testset="t", dtype="float32")  # finite: nothing
    bad = ok.clone()
    bad[1, 0] = float("inf")
    with pytest.raises(EvaluationRefused, match=r"1 of 3 examples.*example 1.*float32"):
        check_finite(bad, model, checkpoint="ck", testset="t", dtype="bfloat16")


# ---- a checkpoint checked against its place before it is scored (issue 25) -----------------------
def _run_with_manifest(tmp_path, tiny, spec, lora=False, n_ckpt=3):
    """A finished run as the finetune leaves it: checkpoint folders and the run's manifest.json, which
    records each checkpoint's weights digest; and its checkpoints as an evaluation job reads them."""

    from oodcorr.jobs.checkpoints import weights_digest
    from oodcorr.jobs.evaluate import checkpoints_to_score

    cks = checkpoint_series(tmp_path, tiny, spec, lora, LABELS, n_ckpt=n_ckpt)
    run = tmp_path / "run"
    entries = [
        {"step": c["step"], "path": c["checkpoint"], "weights": weights_digest(Path(c["checkpoint"]))} for c in cks
    ]
    (run / "manifest.json").write_text(json.dumps({"model": "tiny", "checkpoints": entries}))
    steps = [c["step"] for c in cks]
    return checkpoints_to_score([str(run / "manifest.json")], steps, [str(tmp_path / f"p{s}.parquet") for s in steps])


def test_a_record_names_its_libraries_and_those_that_trained_its_checkpoint(tmp_path, tiny_models):
    """Each record keeps the libraries the evaluation ran with and, copied from the run's manifest, those
    that trained its checkpoint (None where the manifest predates them). Neither is part of the
    evaluation's key: a manifest naming other libraries later leaves the predictions as they were."""
    from oodcorr.core.provenance import library_versions
    from oodcorr.core.records import read_result
    from oodcorr.jobs.evaluate import EvalParams, checkpoints_to_score, evaluate_run

    tiny = str(tiny_models["opt"])
    spec = {"name": "tiny", "tiny": {"model_type": "opt"}}
    cache = _one_testset(tmp_path, tiny, spec)
    cks = _run_with_manifest(tmp_path, tiny, spec, n_ckpt=2)
    manifest = tmp_path / "run/manifest.json"
    doc = json.loads(manifest.read_text())
    trained = {"torch": "2.12.0", "transformers": "5.23.0", "peft": "0.21.0"}
    doc["checkpoints"][1]["libraries"] = trained  # step 10; step 0's entry has none (an older manifest)
    manifest.write_text(json.dumps(doc))
    preds = [c["predictions"] for c in cks]

    def run():
        cks = checkpoints_to_score([str(manifest)], [0, 10], preds)
        return evaluate_run(
            EvalParams(spec, tiny, {}),
            checkpoints=cks,
            tokenized=cache,
            batch_size=8,
            max_tokens=10**6,
        )["checkpoints"]

    recs = run()
    assert [r["libraries"] for r in recs] == [library_versions()] * 2
    assert [r["finetune_libraries"] for r in recs] == [None, trained]
    assert read_result(preds[1])["finetune_libraries"] == trained
    mtimes = [Path(p).stat().st_mtime_ns for p in preds]
    doc["checkpoints"][1]["libraries"] = dict(trained, torch="2.13.0")
    manifest.write_text(json.dumps(doc))
    again = run()
    assert [r["eval_key"] for r in again] == [r["eval_key"] for r in recs]
    assert [Path(p).stat().st_mtime_ns for p in preds] == mtimes  # kept, not scored again
    assert again[1]["finetune_libraries"] == trained  # as recorded when it was scored


@pytest.mark.parametrize("lora", [False, True])
@pytest.mark.parametrize("unit", ["checkpoint", "run"])
def test_a_checkpoint_folder_replaced_by_another_steps_is_not_scored_as_that_step(tmp_path, tiny_models, unit, lora):
    """`cp -r checkpoint-20 checkpoint-10`: its files match its own manifest, which names step 20: refused
    as step 10 (before its old predictions could be reused, too). With the manifest's step edited to 10
    as well, the weights digest the run's manifest recorded for step 10 refuses it. Full weights and
    LoRA adapters alike; nothing is written for it. (Before: scored as step 10.)"""
    import os
    import shutil

    from oodcorr.jobs.evaluate import EvalParams, EvaluationRefused, evaluate_run

    tiny = str(tiny_models["opt"])
    spec = {"name": "tiny", "tiny": {"model_type": "opt"}}
    cache = _one_testset(tmp_path, tiny, spec)
    cks = _run_with_manifest(tmp_path, tiny, spec, lora)
    ck10, ck20 = Path(cks[1]["checkpoint"]), Path(cks[2]["checkpoint"])
    shutil.rmtree(ck10)
    shutil.copytree(ck20, ck10)
    todo = cks if unit == "run" else cks[1:2]
    common = dict(job=EvalParams(spec, tiny, {}), tokenized=cache, batch_size=8, max_tokens=10**6)
    with pytest.raises(EvaluationRefused) as e:
        evaluate_run(checkpoints=todo, **common)
    msg = str(e.value)
    assert f"{ck10} holds the checkpoint of step 20" in msg and "not that of step 10" in msg
    assert f"delete {tmp_path / 'run/manifest.json'} and run again" in msg
    assert not os.path.exists(cks[1]["predictions"])
    manifest = ck10 / "oodcorr_manifest.json"
    manifest.write_text(json.dumps(dict(json.loads(manifest.read_text()), step=10)))  # a careful attacker
    with pytest.raises(EvaluationRefused) as e:
        evaluate_run(checkpoints=todo, **common)
    msg = str(e.value)
    assert f"the weights in {ck10} are not those the run's finetune saved for step 10" in msg
    assert f"delete {ck10} and {tmp_path / 'run/manifest.json'} and run again" in msg
    assert not os.path.exists(cks[1]["predictions"])


def test_a_run_manifest_without_the_digests_is_refused_with_the_way_out(tmp_path):
    """Every finetune records each checkpoint's weights digest in the run's manifest; one without them
    (made by hand, or by a version before the digests) is refused before anything is scored, naming it
    and what to do. (Before: evaluated, each checkpoint checked by its own step only.)"""
    from oodcorr.jobs.evaluate import EvaluationRefused, checkpoints_to_score

    manifest = tmp_path / "run/manifest.json"
    manifest.parent.mkdir()
    entries = [{"step": s, "path": str(tmp_path / f"run/checkpoints/checkpoint-{s}")} for s in (0, 10)]
    manifest.write_text(json.dumps({"model": "tiny", "checkpoints": entries}))
    with pytest.raises(EvaluationRefused) as e:
        checkpoints_to_score([str(manifest)], [0, 10], [str(tmp_path / "p0.parquet"), str(tmp_path / "p10.parquet")])
    msg = str(e.value)
    assert msg.startswith(f"{manifest}: the run manifest records no weights digest for checkpoint(s) [0, 10]"), msg
    assert msg.endswith(
        "delete it and run again: the run's finetune writes it again (without training, when its checkpoints are whole)"
    ), msg
    entries[0]["weights"] = entries[1]["weights"] = "d" * 64
    manifest.write_text(json.dumps({"model": "tiny", "checkpoints": entries}))
    got = checkpoints_to_score([str(manifest)], [0, 10], [str(tmp_path / "p0.parquet"), str(tmp_path / "p10.parquet")])
    assert [c["weights"] for c in got] == ["d" * 64, "d" * 64]


def test_a_predictions_file_of_another_place_is_not_reused(tmp_path, tiny_models):
    """Unit run keeps a predictions file made by exactly its evaluation (same key). A copy of another
    experiment's file (same settings, so the same key) over it is computed again, not kept."""
    import os
    import shutil

    from oodcorr.core.records import read_result
    from oodcorr.jobs.evaluate import EvalParams, evaluate_run

    tiny = str(tiny_models["opt"])
    spec = {"name": "tiny", "tiny": {"model_type": "opt"}}
    cache = _one_testset(tmp_path, tiny, spec)
    cks = _run_with_manifest(tmp_path, tiny, spec, n_ckpt=2)
    common = dict(job=EvalParams(spec, tiny, {}), tokenized=cache, batch_size=8, max_tokens=10**6)
    other = [dict(c, predictions=str(tmp_path / f"other-experiment-{c['step']}.parquet")) for c in cks]
    evaluate_run(checkpoints=other, **common)
    evaluate_run(checkpoints=cks, **common)
    assert read_result(cks[0]["predictions"])["eval_key"] == read_result(other[0]["predictions"])["eval_key"]
    shutil.copyfile(other[0]["predictions"], cks[0]["predictions"])
    mtime = os.stat(cks[1]["predictions"]).st_mtime_ns
    evaluate_run(checkpoints=cks, **common)
    assert read_result(cks[0]["predictions"])["predictions"] == cks[0]["predictions"]  # written again, here
    assert os.stat(cks[1]["predictions"]).st_mtime_ns == mtime  # the right one is kept


# ---- truncated records the workflow wrote ---------------------------------------------------------
def test_a_truncated_run_manifest_is_named_with_the_way_out(tmp_path):
    """The evaluate job reads the run's manifest first: a truncated one stopped it with a JSONDecodeError."""
    from oodcorr.core.errors import ResultError
    from oodcorr.jobs.evaluate import checkpoints_to_score

    man = truncated_json(tmp_path / "run/manifest.json", {"steps": [0, 4, 8], "trained": True, "loss_history": []})
    with pytest.raises(ResultError) as e:
        checkpoints_to_score([str(man)], [0], [str(tmp_path / "p.parquet")])
    assert re.fullmatch(
        rf"{re.escape(str(man))}: a checkpoint manifest is unreadable \(truncated or damaged: .* at line \d+, column "
        r"\d+\); delete it and run again: its job writes it again \(a finetune whose checkpoints are all there does "
        r"not train again, it checks them\)",
        str(e.value),
    ), str(e.value)


def test_the_evaluate_job_ends_with_that_sentence_not_a_traceback(tmp_path):
    man = truncated_json(tmp_path / "run/manifest.json", {"steps": [0, 4], "trained": True})
    msg = run_rule_script(
        "evaluate",
        tmp_path,
        config={"evaluation": {"batch_size": 8, "max_tokens": 512}},
        params=types.SimpleNamespace(job={}),
        resources=types.SimpleNamespace(attempt=1, gpu=0),
        wildcards=Wildcards(step="0"),
        input=types.SimpleNamespace(manifest=str(man), tokenized=str(tmp_path / "t.pt")),
        output=[str(tmp_path / "p.parquet")],
        threads=1,
    )
    assert msg is not None and msg.startswith(f"oodcorr: {man}: a checkpoint manifest is unreadable"), msg
