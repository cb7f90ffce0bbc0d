"""Scoring a testset (oodcorr.jobs.scoring): batching, one forward pass per example, retrying smaller
on out-of-memory, and the evaluation dtype."""

import functools
import random

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from oodcorr.core.model_entry import ModelEntry
from oodcorr.jobs.scoring import eval_dtype, length_batches, score
from oodcorr.modeling import synthetic
from oodcorr.modeling.prompting import encode_prompts, verbaliser_ids

from helpers import (
    LABELS,
    PROMPT,
)


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


def test_eval_dtype_follows_evaluation_dtype_then_the_model_entry_whose_default_is_float32():
    assert eval_dtype(ModelEntry(name="m")) == "float32"
    assert eval_dtype(ModelEntry(name="m", dtype="bfloat16")) == "bfloat16"
    assert eval_dtype(ModelEntry(name="m", dtype="bfloat16"), "model") == "bfloat16"
    assert eval_dtype(ModelEntry(name="m", dtype="float32"), "model") == "float32"
    assert eval_dtype(ModelEntry(name="m", dtype="float32"), "bfloat16") == "bfloat16"


def test_a_cpu_job_batches_by_its_threads_and_other_devices_as_configured():
    from oodcorr.jobs.scoring import CPU_OVERHEAD_PER_THREAD, CPU_TOKENS_PER_THREAD, device_batching

    assert device_batching("cpu", 1, 32, 16384) == (32, CPU_TOKENS_PER_THREAD, CPU_OVERHEAD_PER_THREAD)
    assert device_batching("cpu", 2, 32, 16384) == (32, 2 * CPU_TOKENS_PER_THREAD, 2 * CPU_OVERHEAD_PER_THREAD)
    assert device_batching("cpu", 4, 8, 300)[1] == 300  # the config's bound (or a retry's halving) still holds
    assert device_batching("cuda", 2, 32, 16384) == (32, 16384, None)
