"""Caches cut short or from elsewhere: a tokenised testset truncated (a full disk, a killed copy) or
made by another tokenizer, and a model folder missing a weight shard. Each is found before anything
is scored, named with what to do, and (a cache, in a run that may write) made again."""

from __future__ import annotations

import json
import os
import shutil

import pytest
import torch
import yaml
from safetensors.torch import save_file

from oodcorr.core.errors import ConfigError, ResultError
from oodcorr.core.model_dirs import check_local_weights
from oodcorr.core.model_entry import ModelEntry
from oodcorr.core.token_cache import cache_info_path, cache_problem
from oodcorr.jobs.tokenize_testset import read_tokenized
from oodcorr.modeling import synthetic
from oodcorr.modeling.loading import tokenizer_fingerprint

from helpers import REPO, tokenised_testset

SPEC = {"name": "tiny", "tiny": {"model_type": "opt"}}  # the params form, as the rule passes it
ENTRY = ModelEntry.from_params(SPEC)


def _tokenised(tmp_path, built_model_dir):
    records = synthetic.generate("negation", 40, 0)
    return tokenised_testset(
        tmp_path, built_model_dir, SPEC, records, {"fingerprint": "f", "records_sha256": "r"}, "t", 64
    )[2]


def test_a_cache_records_its_tokenizer_and_reads_back_whole(tmp_path, tiny_models):
    cache = _tokenised(tmp_path, tiny_models["opt"])
    fp = tokenizer_fingerprint(ENTRY, str(tiny_models["opt"]))
    assert fp and read_tokenized(cache, fp)["tokenizer"] == fp
    assert json.loads(cache_info_path(cache).read_text())["tokenizer"] == fp
    assert cache_problem(cache, fp) is None


def test_a_cache_cut_short_is_refused_before_scoring_naming_what_to_delete(tmp_path, tiny_models):
    cache = _tokenised(tmp_path, tiny_models["opt"])
    raw = cache.read_bytes()
    cache.write_bytes(raw[: len(raw) * 2 // 3])
    fp = tokenizer_fingerprint(ENTRY, str(tiny_models["opt"]))
    with pytest.raises(ResultError) as e:
        read_tokenized(cache, fp)
    assert str(cache) in str(e.value) and "delete it" in str(e.value) and "tokenize_testset" in str(e.value)
    assert "cut short" in cache_problem(cache, fp)  # found without torch too (planning)


def test_a_cache_made_by_another_tokenizer_is_refused(tmp_path, tiny_models):
    mine = _tokenised(tmp_path / "a", tiny_models["opt"])
    other_dir = tmp_path / "other-tokenizer"
    shutil.copytree(tiny_models["opt"], other_dir)
    tok = json.loads((other_dir / "tokenizer.json").read_text())
    vocab = tok["model"]["vocab"]
    a, b = sorted(vocab)[10:12]
    vocab[a], vocab[b] = vocab[b], vocab[a]  # another tokenizer: two token ids swapped
    (other_dir / "tokenizer.json").write_text(json.dumps(tok))
    theirs = tokenizer_fingerprint(ENTRY, str(other_dir))
    assert theirs != tokenizer_fingerprint(ENTRY, str(tiny_models["opt"]))
    with pytest.raises(ResultError) as e:
        read_tokenized(mine, theirs)
    assert "made by another tokenizer" in str(e.value) and str(mine) in str(e.value)
    assert "another tokenizer" in cache_problem(mine, theirs)


def test_planning_deletes_a_cut_cache_in_a_run_and_only_names_it_in_a_dry_run(tmp_path, monkeypatch):
    from oodcorr.launch.disk_checks import check_tokenized_caches
    from oodcorr.planning.plan import load

    monkeypatch.chdir(tmp_path)
    plan = load(yaml.safe_load((REPO / "config/micro.yaml").read_text()), REPO, [REPO / "config/micro.yaml"])
    model = next(iter(plan.models))
    testset = sorted({t for ts in plan.testsets.values() for t, _ in ts})[0]
    rel = plan.paths.tokenized.format(model=model, testset=testset)  # relative to the working folder
    cache = tmp_path / rel
    cache.parent.mkdir(parents=True)
    torch.save({"format": 2, "input_ids": [[1, 2]] * 100, "labels": [0] * 100}, cache)
    cache.write_bytes(cache.read_bytes()[:200])
    cache_info_path(cache).write_text(json.dumps({"n": 100, "n_truncated": 0}))
    dry = check_tokenized_caches(plan, rebuild=False)
    assert len(dry) == 1 and rel in dry[0] and "cut short" in dry[0] and cache.exists()
    run = check_tokenized_caches(plan, rebuild=True)
    assert len(run) == 1 and "tokenises the testset again" in run[0]
    assert not cache.exists() and not cache_info_path(cache).exists()  # Snakemake makes it again


def test_a_model_folder_missing_a_shard_is_refused_naming_it(tmp_path):
    d = tmp_path / "model"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"model_type": "opt"}))
    save_file({"a": torch.zeros(4)}, d / "model-00001-of-00002.safetensors")
    index = {
        "metadata": {},
        "weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"},
    }
    (d / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(ConfigError) as e:
        check_local_weights(str(d), ModelEntry(name="sharded"))
    msg = str(e.value)
    assert "models[sharded]" in msg and "model-00002-of-00002.safetensors" in msg and "1 of the 2" in msg
    save_file({"b": torch.zeros(4)}, d / "model-00002-of-00002.safetensors")
    check_local_weights(str(d), ModelEntry(name="sharded"))  # whole again: fine


# ---- a cache that changed after it was written, or that cannot be checked (issues 39 and 41) -------
def _flip_a_token_id_bit(cache, ids) -> None:
    """Flip the low bit of one token id in the cache's pickle (stored uncompressed in the torch.save
    zip), keeping the file's size and modification time: a bit flipped on disk or in a copy."""
    raw = bytearray(cache.read_bytes())
    a, b = ids[0][1], ids[0][2]  # two neighbouring ids of the first prompt, as pickle writes them

    def enc(i: int) -> bytes:  # BININT1 below 256, else BININT2 (a tokenizer's ids are below 65,536)
        return b"K" + bytes([i]) if i < 256 else b"M" + i.to_bytes(2, "little")

    at = raw.find(enc(a) + enc(b))
    assert at > 0, "the token ids were not found in the file"
    raw[at + 1] ^= 1
    st = cache.stat()
    cache.write_bytes(bytes(raw))
    os.utime(cache, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_a_bit_flipped_in_a_token_id_is_refused_before_scoring(tmp_path, tiny_models):
    cache = _tokenised(tmp_path, tiny_models["opt"])
    fp = tokenizer_fingerprint(ENTRY, str(tiny_models["opt"]))
    ids = read_tokenized(cache, fp)["input_ids"]
    size, mtime = cache.stat().st_size, cache.stat().st_mtime_ns
    _flip_a_token_id_bit(cache, ids)
    assert (cache.stat().st_size, cache.stat().st_mtime_ns) == (size, mtime)
    assert torch.load(cache, weights_only=True)["input_ids"] != ids  # torch reads it, with another id
    with pytest.raises(ResultError) as e:
        read_tokenized(cache, fp)
    msg = str(e.value)
    assert str(cache) in msg and "changed after it was written" in msg and "delete it" in msg


def test_a_cache_from_before_the_tokenizer_digest_is_not_trusted(tmp_path, tiny_models):
    """A cache of format 2 made before caches recorded their tokenizer (nor a digest of their bytes):
    whose tokenizer made it cannot be told, so it is made again, never scored."""
    cache = tmp_path / "t.pt"
    old = {"format": 2, "testset": "t", "method": "pattern", "input_ids": [[5, 6, 7]] * 4, "labels": [0, 1, 0, 1]}
    old |= {"label_names": ["a", "b"], "pad_id": 1, "n_truncated": 0, "fingerprint": "f", "records_sha256": "r"}
    torch.save(old, cache)
    cache_info_path(cache).write_text(json.dumps({"testset": "t", "model": "tiny", "n": 4, "n_truncated": 0}))
    fp = tokenizer_fingerprint(ENTRY, str(tiny_models["opt"]))
    why = cache_problem(cache, fp)
    assert why is not None and "before" in why and str(cache) in why  # planning has it made again
    with pytest.raises(ResultError) as e:
        read_tokenized(cache, fp)
    assert str(cache) in str(e.value) and "delete it" in str(e.value)


def _micro_plan(tmp_path, monkeypatch):
    from oodcorr.planning.plan import load

    monkeypatch.chdir(tmp_path)
    return load(yaml.safe_load((REPO / "config/micro.yaml").read_text()), REPO, [REPO / "config/micro.yaml"])


def test_two_swapped_caches_are_found_at_planning_and_refused_at_read(tmp_path, monkeypatch, tiny_models):
    from oodcorr.launch.disk_checks import check_tokenized_caches

    plan = _micro_plan(tmp_path, monkeypatch)
    model = next(iter(plan.models))
    a, b = sorted({t for ts in plan.testsets.values() for t, _ in ts})[:2]
    spec = {"name": model, "tiny": {"model_type": "opt"}}
    caches = {}
    for t, seed in ((a, 0), (b, 1)):
        path = tmp_path / plan.paths.tokenized.format(model=model, testset=t)
        records = synthetic.generate("negation", 20, seed)
        meta = {"fingerprint": t, "records_sha256": t}
        caches[t] = tokenised_testset(path.parent, tiny_models["opt"], spec, records, meta, t, 64)[2]
    assert check_tokenized_caches(plan, rebuild=False) == []
    for suffix in (".pt", ".info.json"):  # the two swapped, each with its sidecar
        pa, pb = (cache_info_path(caches[t]) if suffix != ".pt" else caches[t] for t in (a, b))
        swap = pa.with_name("swap")
        pa.rename(swap), pb.rename(pa), swap.rename(pb)
    said = check_tokenized_caches(plan, rebuild=False)
    assert len(said) == 2 and all("holds testset" in w for w in said), said
    fp = tokenizer_fingerprint(ModelEntry.from_params(spec), str(tiny_models["opt"]))
    with pytest.raises(ResultError) as e:
        read_tokenized(caches[a], fp, testset=a, model=model)
    assert f"holds testset {b!r}" in str(e.value) and "delete it" in str(e.value)
