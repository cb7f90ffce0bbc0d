"""The evaluator: batching, one forward pass per example, and retrying smaller on out-of-memory."""

import functools
import random
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from oodcorr.jobs.scoring import eval_dtype, length_batches, score
from oodcorr.modeling import synthetic
from oodcorr.modeling.prompting import encode_prompts, verbaliser_ids

from helpers import LABELS, PROMPT, tokenised_testset


@pytest.mark.parametrize("max_tokens,max_batch", [(64, 8), (200, 64), (10, 4), (10**6, 5)])
def test_length_batches_cover_each_example_once_within_bounds(max_tokens, max_batch):
    rng = random.Random(0)
    lengths = [rng.randint(1, 40) for _ in range(300)]
    batches = length_batches(lengths, max_tokens, max_batch)
    flat = [i for b in batches for i in b]
    assert sorted(flat) == list(range(len(lengths)))
    for b in batches:
        width = max(lengths[i] for i in b)
        assert len(b) <= max_batch
        assert len(b) == 1 or len(b) * width <= max_tokens
    # longest first, and each batch holds a contiguous run of the sorted lengths (minimal padding)
    seq = [lengths[i] for i in flat]
    assert seq == sorted(seq, reverse=True)


def _cost(lengths, batches, overhead):
    return sum(len(b) * max(lengths[i] for i in b) + overhead for b in batches)


@pytest.mark.parametrize("overhead", [0.0, 7.5, 64.0, 10**6])
def test_cost_cut_batches_are_the_cheapest_cover_within_the_bounds(overhead):
    """With an overhead per batch, the cuts minimise padded tokens + overhead x batches over every
    way to cut the length-sorted examples into runs (checked against all of them on small sets),
    within the same bounds and longest first; no overhead means no padding at all."""
    import itertools

    rng = random.Random(1)
    for _ in range(40):
        lengths = [rng.randint(1, 30) for _ in range(rng.randint(1, 9))]
        max_tokens, max_batch = rng.choice([(60, 4), (10**6, 3), (45, 9)])
        got = length_batches(lengths, max_tokens, max_batch, overhead)
        assert sorted(i for b in got for i in b) == list(range(len(lengths)))
        assert all(
            len(b) <= max_batch and (len(b) == 1 or len(b) * max(lengths[i] for i in b) <= max_tokens) for b in got
        )
        seq = [lengths[i] for b in got for i in b]
        assert seq == sorted(seq, reverse=True)
        order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
        best = float("inf")
        for cuts in itertools.product([0, 1], repeat=len(order) - 1):
            runs, cur = [], [order[0]]
            for i, cut in zip(order[1:], cuts):
                if cut:
                    runs.append(cur)
                    cur = []
                cur.append(i)
            runs.append(cur)
            if all(len(b) <= max_batch and (len(b) == 1 or len(b) * lengths[b[0]] <= max_tokens) for b in runs):
                best = min(best, _cost(lengths, runs, overhead))
        assert _cost(lengths, got, overhead) == pytest.approx(best)
        if overhead == 0.0:
            assert all(len({lengths[i] for i in b}) == 1 for b in got)  # nothing padded
        if overhead == 10**6:  # batches cost more than any padding: as few as the bounds allow
            assert len(got) == len(length_batches(lengths, max_tokens, max_batch))


def test_cost_cut_batches_pad_less_than_full_ones_on_real_lengths():
    """RTE-like lengths (a wide spread): batches cut by cost pad a few per cent, full ones far more."""
    rng = random.Random(0)
    lengths = [int(rng.lognormvariate(4.2, 0.4)) for _ in range(160)]

    def padding(batches):
        padded = sum(len(b) * max(lengths[i] for i in b) for b in batches)
        return 1 - sum(lengths) / padded

    full = padding(length_batches(lengths, 16384, 32))
    cut = padding(length_batches(lengths, 16384, 32, overhead=64.0))
    assert cut < 0.05 < full


def _model_and_cache(tiny_models, kind, n=23):
    d = tiny_models[kind]
    tok = AutoTokenizer.from_pretrained(d)
    model = AutoModelForCausalLM.from_pretrained(d).eval()
    recs = synthetic.generate("distractor", n // 2, 0) + synthetic.generate("in-domain", n - n // 2, 1)
    ids, _ = encode_prompts(tok, recs, PROMPT["template"], 128)
    cache = {
        "input_ids": ids,
        "method": "pattern",
        "label_names": LABELS,
        "pad_id": tok.pad_token_id,
        "extra": {"verbaliser_ids": verbaliser_ids(tok, PROMPT["verbalisers"], LABELS)},
    }
    return model, cache


def _count_rows(model, fail_above=None):
    """Wrap ``model.forward`` to count the rows it scores (and fail batches over ``fail_above`` rows)."""
    seen = {"rows": 0, "calls": 0}
    orig = model.forward

    @functools.wraps(orig)
    def forward(*args, **kwargs):
        rows = kwargs["input_ids"].shape[0]
        if fail_above is not None and rows > fail_above:
            raise torch.OutOfMemoryError(f"simulated: {rows} rows")
        seen["rows"] += rows
        seen["calls"] += 1
        return orig(*args, **kwargs)

    model.forward = forward
    return seen


@pytest.mark.parametrize("kind", ["opt", "olmo2"])
def test_score_reads_each_example_once_and_matches_unbatched_logits(tiny_models, kind):
    model, cache = _model_and_cache(tiny_models, kind)
    ids = cache["input_ids"]
    assert len({len(x) for x in ids}) > 3  # several lengths, so batches pad
    seen = _count_rows(model)
    stats = {}
    got = score(model, cache, batch_size=4, max_tokens=10**6, stats=stats)
    assert seen["rows"] == len(ids)  # one forward row per example, not one per label
    assert seen["calls"] == stats["n_batches"] == -(-len(ids) // 4)
    assert stats["padded_tokens"] >= stats["tokens"] == sum(map(len, ids))
    with torch.no_grad():
        for i, x in enumerate(ids):
            want = model(input_ids=torch.tensor([x])).logits[0, -1, cache["extra"]["verbaliser_ids"]]
            torch.testing.assert_close(got[i], want, atol=1e-4, rtol=1e-4)


def test_out_of_memory_halves_the_batch_and_gives_the_same_scores(tiny_models):
    model, cache = _model_and_cache(tiny_models, "opt")
    want = score(model, cache, batch_size=16, max_tokens=10**6)
    seen = _count_rows(model, fail_above=3)
    stats = {}
    got = score(model, cache, batch_size=16, max_tokens=10**6, stats=stats)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    assert stats["n_oom"] == 3 and stats["batch_size"] == 2  # 16 -> 8 -> 4 -> 2
    assert seen["rows"] == len(cache["input_ids"])  # nothing scored twice after a retry


def test_out_of_memory_mid_testset_keeps_the_batches_already_scored(tiny_models):
    model, cache = _model_and_cache(tiny_models, "opt")
    want = score(model, cache, batch_size=4, max_tokens=10**6)
    orig = model.forward
    calls = {"n": 0}

    @functools.wraps(orig)
    def forward(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 3:  # the third batch fails once, as a fragmenting allocator might
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return orig(*args, **kwargs)

    model.forward = forward
    stats = {}
    got = score(model, cache, batch_size=4, max_tokens=10**6, stats=stats)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    assert stats["n_oom"] == 1 and stats["batch_size"] == 2


def test_out_of_memory_on_one_example_and_other_errors_are_raised(tiny_models):
    model, cache = _model_and_cache(tiny_models, "opt", n=6)
    _count_rows(model, fail_above=0)
    with pytest.raises(RuntimeError, match="single example"):
        score(model, cache, batch_size=8, max_tokens=10**6)

    model2, _ = _model_and_cache(tiny_models, "opt", n=6)
    orig = model2.forward

    @functools.wraps(orig)
    def broken(*args, **kwargs):
        raise ValueError("not a memory problem")

    model2.forward = broken
    with pytest.raises(ValueError, match="not a memory problem"):
        score(model2, cache, batch_size=8, max_tokens=10**6)


def test_eval_dtype_follows_evaluation_dtype_then_the_model_entry_else_float32_on_cpu():
    assert eval_dtype({"name": "m"}, "cpu") == "float32"
    assert eval_dtype({"name": "m", "dtype": "bfloat16"}, "cpu") == "bfloat16"
    assert eval_dtype({"name": "m", "dtype": "float32"}, "cpu", "model") == "float32"
    assert eval_dtype({"name": "m", "dtype": "float32"}, "cpu", "bfloat16") == "bfloat16"


def test_a_cpu_job_batches_by_its_threads_and_other_devices_as_configured():
    from oodcorr.jobs.scoring import CPU_OVERHEAD_PER_THREAD, CPU_TOKENS_PER_THREAD, device_batching

    assert device_batching("cpu", 1, 32, 16384) == (32, CPU_TOKENS_PER_THREAD, CPU_OVERHEAD_PER_THREAD)
    assert device_batching("cpu", 2, 32, 16384) == (32, 2 * CPU_TOKENS_PER_THREAD, 2 * CPU_OVERHEAD_PER_THREAD)
    assert device_batching("cpu", 4, 8, 300)[1] == 300  # the config's bound (or a retry's halving) still holds
    assert device_batching("cuda", 2, 32, 16384) == (32, 16384, None)


def test_a_job_records_its_padding_and_when_it_first_scored(tmp_path, tiny_models):
    """Each record says how much of its batches was padding (what the CPU rule cut them for), and
    the job's timing says how long after its process started it began scoring and had its first
    batch scored; a bfloat16 evaluation is recorded (and keyed) as one."""
    from oodcorr.jobs.evaluate import evaluate_run

    tiny = str(tiny_models["olmo2"])
    spec = {"name": "tiny", "tiny": {"model_type": "olmo2"}}
    data, meta, cache = _synthetic_testset(tmp_path, tiny, spec, "distractor", 40, 5)
    ck = _series(tmp_path, tiny, spec, False, LABELS, n_ckpt=1)[0]
    recs = {}
    for dtype in (None, "bfloat16"):
        recs[dtype] = evaluate_run(
            model_spec=dict(spec, dtype="float32"),
            tiny_dir=tiny,
            checkpoints=[dict(ck, predictions=str(tmp_path / f"{dtype}.parquet"))],
            tokenized=str(cache),
            batch_size=32,
            max_tokens=16384,
            provenance={"run_id": "r"},
            dtype=dtype,
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
    import json

    from oodcorr.jobs import evaluate

    monkeypatch.setattr(evaluate, "device_batching", lambda device, threads, rows, tokens: (rows, tokens, None))

    from oodcorr.core.io import write_jsonl_atomic
    from oodcorr.core.records import read_result
    from oodcorr.jobs.checkpoints import write_ckpt_manifest
    from oodcorr.jobs.data import prepare
    from oodcorr.jobs.evaluate import evaluate_run
    from oodcorr.modeling.loading import load_model

    from helpers import BINARY

    tiny = str(tiny_models["opt"])
    spec = {"name": "tiny", "tiny": {"model_type": "opt"}}
    raw = tmp_path / "raw.jsonl"
    write_jsonl_atomic(raw, synthetic.generate("negation", 40, 3))
    recs, prov = prepare("neg", {"source": "local", "path": str(raw)}, BINARY)
    data, meta, cache = _tokenised_testset(tmp_path, tiny, spec, recs, prov)
    cks = []
    for step in (0, 5):
        ck = tmp_path / "run" / "checkpoints" / f"checkpoint-{step}"
        load_model(spec, tiny).save_pretrained(ck)
        write_ckpt_manifest(ck, step, resumable=False)
        cks.append({"step": step, "checkpoint": str(ck), "predictions": str(tmp_path / f"p{step}.parquet")})

    def run(name):
        out = [dict(c, predictions=str(tmp_path / f"{name}{c['step']}.parquet")) for c in cks]
        return evaluate_run(
            model_spec=spec,
            tiny_dir=tiny,
            checkpoints=out,
            tokenized=str(cache),
            batch_size=16,
            max_tokens=10**6,
            out_summary=str(tmp_path / f"{name}.json"),
            provenance={"run_id": "r"},
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


def _synthetic_testset(tmp_path, tiny, spec, task, n, seed):
    """A synthetic testset ``neg`` of ``n`` examples, tokenised as the workflow does it:
    (data file, meta file, tokenised cache)."""
    return _tokenised_testset(
        tmp_path, tiny, spec, synthetic.generate(task, n, seed), {"fingerprint": "f", "records_sha256": "r"}
    )


def _tokenised_testset(tmp_path, tiny, spec, records, meta_doc):
    """Testset ``neg`` of ``records`` with its meta file ``meta_doc``, tokenised as the workflow does
    it: (data file, meta file, tokenised cache)."""
    return tokenised_testset(tmp_path, tiny, spec, records, meta_doc)


def _series(tmp_path, tiny_dir, spec, lora: bool, labels, n_ckpt=3):
    """A run's checkpoint folders as finetuning writes them: full weights or LoRA adapters,
    each perturbed differently (so every checkpoint scores differently), with manifests."""
    from oodcorr.jobs.checkpoints import write_ckpt_manifest
    from oodcorr.jobs.finetune import apply_lora
    from oodcorr.modeling.adaptation import get
    from oodcorr.modeling.loading import load_model

    method = get(spec.get("method"))
    tok_pad = 1
    out = []
    for step in range(n_ckpt):
        torch.manual_seed(100 + step)
        model = load_model(spec, tiny_dir, "cpu", labels, tok_pad)
        if lora:
            model = apply_lora(model, {"r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]}, method.peft_task)
            trained = [p for n, p in model.named_parameters() if p.requires_grad]
        else:
            trained = list(model.parameters())
        with torch.no_grad():
            for p in trained:
                p.add_(torch.randn_like(p) * 0.05)
        ck = tmp_path / "run" / "checkpoints" / f"checkpoint-{step * 10}"
        model.save_pretrained(ck)
        write_ckpt_manifest(ck, step * 10, resumable=False)
        out.append({"step": step * 10, "checkpoint": str(ck)})
    return out


@pytest.mark.parametrize(
    "kind, method, lora",
    [("opt", "pattern", False), ("opt", "pattern", True), ("olmo2", "pattern", True), ("opt", "head", True)],
)
def test_both_evaluation_units_write_identical_predictions(tmp_path, tiny_models, kind, method, lora):
    """Unit `run` (one process: the model loaded once, each checkpoint's weights or adapter
    swapped in) and unit `checkpoint` (a fresh load per checkpoint) write the same files:
    every prediction and logit bit for bit, and the same scores."""
    import pandas as pd

    from oodcorr.core.io import write_json_atomic, write_jsonl_atomic
    from oodcorr.core.records import read_result
    from oodcorr.jobs.evaluate import evaluate_run
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
        tiny_dir=tiny,
        testset="neg",
        data_path=str(data),
        data_meta=str(meta),
        labels=LABELS,
        prompt=PROMPT if method == "pattern" else None,
        max_length=128,
        out_path=str(cache),
    )
    cks = _series(tmp_path, tiny, spec, lora, LABELS)
    common = dict(
        model_spec=spec, tiny_dir=tiny, tokenized=str(cache), batch_size=8, max_tokens=10**6, provenance={"run_id": "r"}
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


@pytest.mark.parametrize("lean", ["0", "1"])
def test_run_unit_swaps_adapters_whose_config_differs_only_in_the_order_of_target_modules(
    tmp_path, tiny_models, monkeypatch, lean
):
    """peft writes target_modules (a set) in an order that changes between processes, so one run's
    checkpoints can differ in that order (a finetuning job resumed after a kill). With peft's adapter
    layers (OODCORR_LEAN=0, or an adapter a fold does not know) such an adapter is still swapped in,
    not loaded afresh with its base model; one whose settings really differ (lora_alpha) is loaded
    afresh. Folded, every adapter of the run is folded into the one base model. Either way the
    predictions equal a fresh load's, bit for bit."""
    import json
    from pathlib import Path

    import pandas as pd

    from oodcorr.jobs.checkpoints import write_ckpt_manifest
    from oodcorr.jobs.evaluate import evaluate_run

    monkeypatch.setenv("OODCORR_LEAN", lean)
    tiny = str(tiny_models["opt"])
    spec = {"name": "tiny", "tiny": {"model_type": "opt"}}
    data, meta, cache = _synthetic_testset(tmp_path, tiny, spec, "negation", 30, 5)
    cks = _series(tmp_path, tiny, spec, True, LABELS, n_ckpt=3)

    def rewrite_config(ck: dict, change) -> None:
        path = Path(ck["checkpoint"]) / "adapter_config.json"
        cfg = json.loads(path.read_text())
        change(cfg)
        path.write_text(json.dumps(cfg, indent=2))
        write_ckpt_manifest(Path(ck["checkpoint"]), ck["step"], resumable=False)

    first = json.loads((Path(cks[0]["checkpoint"]) / "adapter_config.json").read_text())["target_modules"]
    assert len(first) == 2
    rewrite_config(cks[1], lambda c: c.update(target_modules=first[::-1]))  # the same set, the other order
    rewrite_config(cks[2], lambda c: c.update(lora_alpha=2 * c["lora_alpha"]))  # really another adapter
    common = dict(
        model_spec=spec, tiny_dir=tiny, tokenized=str(cache), batch_size=8, max_tokens=10**6, provenance={"run_id": "r"}
    )
    one_job = evaluate_run(
        checkpoints=[dict(c, predictions=str(tmp_path / f"run{c['step']}.parquet")) for c in cks], **common
    )
    loads = [r["load"] for r in one_job["checkpoints"]]
    assert loads == (["fresh", "adapter swap", "fresh"] if lean == "0" else ["fresh", "adapter swap", "adapter swap"])
    assert {r["lora"] for r in one_job["checkpoints"]} == {"peft" if lean == "0" else "folded"}
    for c in cks:
        fresh = evaluate_run(checkpoints=[dict(c, predictions=str(tmp_path / f"ck{c['step']}.parquet"))], **common)
        assert fresh["checkpoints"][0]["load"] == "fresh"
        pd.testing.assert_frame_equal(
            pd.read_parquet(tmp_path / f"run{c['step']}.parquet"), pd.read_parquet(tmp_path / f"ck{c['step']}.parquet")
        )


def test_a_run_job_keeps_predictions_made_by_exactly_this_evaluation(tmp_path, tiny_models):
    """Resuming (or switching units): a predictions file whose record has this evaluation's key is
    kept; one made from other weights is computed again."""
    import os

    from oodcorr.jobs.checkpoints import write_ckpt_manifest
    from oodcorr.jobs.evaluate import evaluate_run
    from oodcorr.modeling.loading import load_model

    tiny = str(tiny_models["opt"])
    spec = {"name": "tiny", "tiny": {"model_type": "opt"}}
    data, meta, cache = _synthetic_testset(tmp_path, tiny, spec, "negation", 20, 3)
    cks = _series(tmp_path, tiny, spec, False, LABELS, n_ckpt=2)
    cks = [dict(c, predictions=str(tmp_path / f"p{c['step']}.parquet")) for c in cks]
    common = dict(
        model_spec=spec,
        tiny_dir=tiny,
        checkpoints=cks,
        tokenized=str(cache),
        batch_size=8,
        max_tokens=10**6,
        provenance={"run_id": "r"},
    )
    first = evaluate_run(**common)
    mtimes = [os.stat(c["predictions"]).st_mtime_ns for c in cks]
    again = evaluate_run(**common)
    assert [os.stat(c["predictions"]).st_mtime_ns for c in cks] == mtimes  # nothing rewritten
    assert [r["accuracy"] for r in again["checkpoints"]] == [r["accuracy"] for r in first["checkpoints"]]
    # checkpoint 10 is retrained (other weights): its predictions are computed again
    model = load_model(spec, tiny)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(0.5)
    model.save_pretrained(cks[1]["checkpoint"])
    write_ckpt_manifest(__import__("pathlib").Path(cks[1]["checkpoint"]), 10, resumable=False)
    evaluate_run(**common)
    after = [os.stat(c["predictions"]).st_mtime_ns for c in cks]
    assert after[0] == mtimes[0] and after[1] != mtimes[1]


def _one_testset(tmp_path, tiny, spec):

    data, meta, cache = _synthetic_testset(tmp_path, tiny, spec, "negation", 20, 3)
    return str(cache)


@pytest.mark.parametrize("unit", ["checkpoint", "run"])
def test_a_checkpoint_whose_bytes_changed_is_refused(tmp_path, tiny_models, unit):
    """Same size, same modification time, other bytes: the sha256 check (cached per file by its
    stat, which any write changes) refuses it, naming the checkpoint and the way out; nothing
    is written for it. (Before: sizes only, so it was evaluated.)"""
    import os

    from oodcorr.jobs.evaluate import EvaluationRefused, evaluate_run

    tiny = str(tiny_models["opt"])
    spec = {"name": "tiny", "tiny": {"model_type": "opt"}}
    cache = _one_testset(tmp_path, tiny, spec)
    cks = [
        dict(c, predictions=str(tmp_path / f"p{c['step']}.parquet"))
        for c in _series(tmp_path, tiny, spec, False, LABELS, n_ckpt=2)
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
            model_spec=spec,
            tiny_dir=tiny,
            checkpoints=todo,
            tokenized=cache,
            batch_size=8,
            max_tokens=10**6,
            provenance={"run_id": "r"},
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
    from oodcorr.jobs.evaluate import EvaluationRefused, evaluate_run
    from oodcorr.modeling.loading import load_model

    tiny = str(tiny_models["opt"])
    spec = {"name": "tiny", "tiny": {"model_type": "opt"}}
    cache = _one_testset(tmp_path, tiny, spec)
    cks = [
        dict(c, predictions=str(tmp_path / f"p{c['step']}.parquet"))
        for c in _series(tmp_path, tiny, spec, False, LABELS, n_ckpt=2)
    ]
    model = load_model(spec, tiny)
    with torch.no_grad():
        for p in model.parameters():
            p.fill_(float("nan"))
    model.save_pretrained(cks[1]["checkpoint"])
    write_ckpt_manifest(__import__("pathlib").Path(cks[1]["checkpoint"]), 10, resumable=False)
    todo = cks if unit == "run" else cks[1:]
    with pytest.raises(EvaluationRefused) as e:
        evaluate_run(
            model_spec=spec,
            tiny_dir=tiny,
            checkpoints=todo,
            tokenized=cache,
            batch_size=8,
            max_tokens=10**6,
            provenance={"run_id": "r"},
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
    import json

    from oodcorr.jobs.checkpoints import weights_digest
    from oodcorr.jobs.evaluate import checkpoints_to_score

    cks = _series(tmp_path, tiny, spec, lora, LABELS, n_ckpt=n_ckpt)
    run = tmp_path / "run"
    entries = [
        {"step": c["step"], "path": c["checkpoint"], "weights": weights_digest(Path(c["checkpoint"]))} for c in cks
    ]
    (run / "manifest.json").write_text(json.dumps({"model": "tiny", "checkpoints": entries}))
    steps = [c["step"] for c in cks]
    return checkpoints_to_score([str(run / "manifest.json")], steps, [str(tmp_path / f"p{s}.parquet") for s in steps])


@pytest.mark.parametrize("lora", [False, True])
@pytest.mark.parametrize("unit", ["checkpoint", "run"])
def test_a_checkpoint_folder_replaced_by_another_steps_is_not_scored_as_that_step(tmp_path, tiny_models, unit, lora):
    """`cp -r checkpoint-20 checkpoint-10`: its files match its own manifest, which names step 20: refused
    as step 10 (before its old predictions could be reused, too). With the manifest's step edited to 10
    as well, the weights digest the run's manifest recorded for step 10 refuses it. Full weights and
    LoRA adapters alike; nothing is written for it. (Before: scored as step 10.)"""
    import json
    import os
    import shutil

    from oodcorr.jobs.evaluate import EvaluationRefused, evaluate_run

    tiny = str(tiny_models["opt"])
    spec = {"name": "tiny", "tiny": {"model_type": "opt"}}
    cache = _one_testset(tmp_path, tiny, spec)
    cks = _run_with_manifest(tmp_path, tiny, spec, lora)
    ck10, ck20 = Path(cks[1]["checkpoint"]), Path(cks[2]["checkpoint"])
    shutil.rmtree(ck10)
    shutil.copytree(ck20, ck10)
    todo = cks if unit == "run" else cks[1:2]
    common = dict(model_spec=spec, tiny_dir=tiny, tokenized=cache, batch_size=8, max_tokens=10**6, provenance={})
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


def test_a_run_manifest_from_before_the_digests_checks_the_step_only(tmp_path, tiny_models):
    """Upgrading: a run's manifest without weights digests (written by the previous version) is
    still evaluated, each checkpoint checked against its own step; nothing is recomputed for it."""
    import json

    from oodcorr.jobs.evaluate import checkpoints_to_score, evaluate_run

    tiny = str(tiny_models["opt"])
    spec = {"name": "tiny", "tiny": {"model_type": "opt"}}
    cache = _one_testset(tmp_path, tiny, spec)
    cks = _run_with_manifest(tmp_path, tiny, spec, n_ckpt=2)
    manifest = tmp_path / "run/manifest.json"
    doc = json.loads(manifest.read_text())
    manifest.write_text(
        json.dumps(dict(doc, checkpoints=[{"step": c["step"], "path": c["path"]} for c in doc["checkpoints"]]))
    )
    old = checkpoints_to_score([str(manifest)], [0, 10], [c["predictions"] for c in cks])
    assert [c["weights"] for c in old] == [None, None]
    out = evaluate_run(
        model_spec=spec, tiny_dir=tiny, checkpoints=old, tokenized=cache, batch_size=8, max_tokens=10**6, provenance={}
    )
    assert [r["step"] for r in out["checkpoints"]] == [0, 10]


def test_a_predictions_file_of_another_place_is_not_reused(tmp_path, tiny_models):
    """Unit run keeps a predictions file made by exactly its evaluation (same key). A copy of another
    experiment's file (same settings, so the same key) over it is computed again, not kept."""
    import os
    import shutil

    from oodcorr.core.records import read_result
    from oodcorr.jobs.evaluate import evaluate_run

    tiny = str(tiny_models["opt"])
    spec = {"name": "tiny", "tiny": {"model_type": "opt"}}
    cache = _one_testset(tmp_path, tiny, spec)
    cks = _run_with_manifest(tmp_path, tiny, spec, n_ckpt=2)
    common = dict(model_spec=spec, tiny_dir=tiny, tokenized=cache, batch_size=8, max_tokens=10**6, provenance={})
    other = [dict(c, predictions=str(tmp_path / f"other-experiment-{c['step']}.parquet")) for c in cks]
    evaluate_run(checkpoints=other, **common)
    evaluate_run(checkpoints=cks, **common)
    assert read_result(cks[0]["predictions"])["eval_key"] == read_result(other[0]["predictions"])["eval_key"]
    shutil.copyfile(other[0]["predictions"], cks[0]["predictions"])
    mtime = os.stat(cks[1]["predictions"]).st_mtime_ns
    evaluate_run(checkpoints=cks, **common)
    assert read_result(cks[0]["predictions"])["predictions"] == cks[0]["predictions"]  # written again, here
    assert os.stat(cks[1]["predictions"]).st_mtime_ns == mtime  # the right one is kept
