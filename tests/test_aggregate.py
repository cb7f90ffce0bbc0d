"""Aggregation: records checked against the data as prepared now; damaged tables named;
results published as a set."""

import json
import os

import pytest
import torch

from oodcorr.core.errors import ResultError
from oodcorr.core.io import publish, write_json_atomic
from oodcorr.jobs.aggregate import collect, read_scores, write_scores
from oodcorr.jobs.evaluate import _write_predictions


def _record(path, testset, fingerprint="synthetic:a", records_sha256="r1", step=0):
    return {
        "model": "m",
        "in_domain": "d",
        "n_train": 8,
        "seed": 0,
        "run_id": "m/d/n8/seed0",
        "step": step,
        "testset": testset,
        "role": "ood",
        "accuracy": 0.5,
        "n": 2,
        "n_correct": 1,
        "fingerprint": fingerprint,
        "records_sha256": records_sha256,
        "checkpoint": "ck",
        "predictions": str(path),
    }


def _predictions(tmp_path, testset, **kw):
    path = tmp_path / f"{testset}{kw.get('step', 0)}.predictions.parquet"
    _write_predictions(
        str(path),
        [0, 1],
        [0, 0],
        [True, False],
        torch.zeros(2, 2),
        ["a", "b"],
        ["a", "b"],
        _record(path, testset, **kw),
    )
    return str(path)


def _prepared(tmp_path, testset, fingerprint="synthetic:a", records_sha256="r1"):
    (tmp_path / "data").mkdir(exist_ok=True)
    write_json_atomic(
        tmp_path / f"data/{testset}.meta.json",
        {"name": testset, "source": "synthetic", "fingerprint": fingerprint, "records_sha256": records_sha256},
    )
    return {"records": str(tmp_path / "data/{dataset}.jsonl"), "meta": str(tmp_path / "data/{dataset}.meta.json")}


def test_records_of_the_data_as_prepared_now_are_collected(tmp_path):
    data = _prepared(tmp_path, "t1")
    paths = [_predictions(tmp_path, "t1", step=s) for s in (0, 5)]
    df = collect(paths, data=data)
    assert list(df["step"]) == [0, 5]


def test_records_of_other_data_stop_the_aggregation(tmp_path):
    """A testset whose prepared copy now has another records hash (edited in place, its time
    kept): the old evaluations are not written as scores. (Before: collected without a check.)"""
    data = _prepared(tmp_path, "t1", records_sha256="r2")
    paths = [_predictions(tmp_path, "t1", step=s) for s in (0, 5)]
    collect(paths)  # without the data check (as before) nothing would be said
    with pytest.raises(ResultError) as e:
        collect(paths, data=data)
    msg = str(e.value)
    assert "'t1'" in msg and "2 of 2" in msg and "touch" in msg and "t1.jsonl" in msg


def test_a_local_file_changed_since_preparation_stops_the_aggregation(tmp_path):
    from oodcorr.core.io import sha256_file, stat_key

    src = tmp_path / "t1.csv"
    src.write_text("premise,hypothesis,label\na,b,entailment\n")
    fingerprint = "sha256:" + sha256_file(src)
    data = _prepared(tmp_path, "t1", fingerprint=fingerprint)
    meta_path = tmp_path / "data/t1.meta.json"
    meta = json.loads(meta_path.read_text())
    meta.update(source="local", path=str(src), source_stat=stat_key(src))
    write_json_atomic(meta_path, meta)
    paths = [_predictions(tmp_path, "t1", fingerprint=fingerprint)]
    collect(paths, data=data)
    st = os.stat(src)
    src.write_text("premise,hypothesis,label\na,c,entailment\n")  # same size, mtime put back
    os.utime(src, ns=(st.st_atime_ns, st.st_mtime_ns))
    with pytest.raises(ResultError, match=r"t1\.csv changed.*touch"):
        collect(paths, data=data)


def test_a_truncated_scores_table_is_named_with_the_way_out(tmp_path):
    import pandas as pd

    df = collect([_predictions(tmp_path, "t1")])
    pq, csv = tmp_path / "scores.parquet", tmp_path / "scores.csv"
    write_scores(df, str(pq), str(csv))
    pd.testing.assert_frame_equal(read_scores(str(pq)), df)
    pq.write_bytes(pq.read_bytes()[:200])
    with pytest.raises(ResultError, match=r"scores\.parquet: not a readable scores table.*delete it"):
        read_scores(str(pq))


def test_publish_replaces_the_set_or_nothing(tmp_path, monkeypatch):
    root = tmp_path / "results/x"
    pairs = []
    for name in ("scores.csv", "analysis/a.csv", "analysis/fig/m.png"):
        staged, published = root / ".staging" / name, root / name
        staged.parent.mkdir(parents=True, exist_ok=True)
        published.parent.mkdir(parents=True, exist_ok=True)
        staged.write_text(f"new {name}")
        published.write_text(f"old {name}")
        pairs.append((staged, published))
    import shutil

    real = shutil.copyfile
    calls = {"n": 0}

    def failing(src, dst, *a, **k):  # the third copy fails (a full disk)
        calls["n"] += 1
        if calls["n"] == 3:
            raise OSError(28, "No space left on device")
        return real(src, dst, *a, **k)

    monkeypatch.setattr(shutil, "copyfile", failing)
    with pytest.raises(OSError):
        publish(pairs)
    assert [p.read_text() for _, p in pairs] == [
        f"old {n}" for n in ("scores.csv", "analysis/a.csv", "analysis/fig/m.png")
    ]
    assert not [f for f in root.rglob(".*.tmp")]  # no copies left behind
    monkeypatch.setattr(shutil, "copyfile", real)
    publish(pairs)
    assert [p.read_text() for _, p in pairs] == [
        f"new {n}" for n in ("scores.csv", "analysis/a.csv", "analysis/fig/m.png")
    ]
    with pytest.raises(ValueError, match="not the staging copy"):
        publish([(root / "scores.csv", root / "analysis/a.csv")])
