"""Caches cut short or from elsewhere: a tokenised testset truncated (a full disk, a killed copy) or
made by another tokenizer, and a model folder missing a weight shard. Each is found before anything
is scored, named with what to do, and (a cache, in a run that may write) made again."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
import yaml
from safetensors.torch import save_file

from oodcorr.core.errors import ConfigError, ResultError
from oodcorr.core.model_dirs import check_local_weights
from oodcorr.core.records import cache_info_path, cache_problem
from oodcorr.jobs.tokenize_testset import read_tokenized
from oodcorr.modeling import synthetic
from oodcorr.modeling.loading import tokenizer_fingerprint

from helpers import REPO, tokenised_testset

SPEC = {"name": "tiny", "tiny": {"model_type": "opt"}}


def _tokenised(tmp_path, built_model_dir):
    records = synthetic.generate("negation", 40, 0)
    return tokenised_testset(
        tmp_path, built_model_dir, SPEC, records, {"fingerprint": "f", "records_sha256": "r"}, "t", 64
    )[2]


def test_a_cache_records_its_tokenizer_and_reads_back_whole(tmp_path, tiny_models):
    cache = _tokenised(tmp_path, tiny_models["opt"])
    fp = tokenizer_fingerprint(SPEC, str(tiny_models["opt"]))
    assert fp and read_tokenized(cache, fp)["tokenizer"] == fp
    assert json.loads(cache_info_path(cache).read_text())["tokenizer"] == fp
    assert cache_problem(cache, fp) is None


def test_a_cache_cut_short_is_refused_before_scoring_naming_what_to_delete(tmp_path, tiny_models):
    cache = _tokenised(tmp_path, tiny_models["opt"])
    raw = cache.read_bytes()
    cache.write_bytes(raw[: len(raw) * 2 // 3])
    fp = tokenizer_fingerprint(SPEC, str(tiny_models["opt"]))
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
    theirs = tokenizer_fingerprint(SPEC, str(other_dir))
    assert theirs != tokenizer_fingerprint(SPEC, str(tiny_models["opt"]))
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
        check_local_weights(str(d), {"name": "sharded"})
    msg = str(e.value)
    assert "models[sharded]" in msg and "model-00002-of-00002.safetensors" in msg and "1 of the 2" in msg
    save_file({"b": torch.zeros(4)}, d / "model-00002-of-00002.safetensors")
    check_local_weights(str(d), {"name": "sharded"})  # whole again: fine
