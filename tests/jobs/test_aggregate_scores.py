"""Aggregation: records checked against their place and against the data as prepared now;
damaged tables named. (Publishing the set: tests/core/test_published.py.)"""

import json
import os
import types

import pandas as pd
import pytest
import torch

from oodcorr.core.atomic_write import write_json_atomic
from oodcorr.core.errors import ResultError
from oodcorr.core.seals import seal
from oodcorr.jobs.aggregate_scores import collect, read_scores, write_scores
from oodcorr.jobs.evaluate import write_predictions

from helpers import run_rule_script


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
        "macro_f1": 1 / 3,
        "ece": 0.5,
        "accuracy_ci_low": 0.09,
        "accuracy_ci_high": 0.91,
        "fingerprint": fingerprint,
        "records_sha256": records_sha256,
        "checkpoint": "ck",
        "predictions": str(path),
    }


def _predictions(tmp_path, testset, **kw):
    path = tmp_path / f"{testset}{kw.get('step', 0)}.predictions.parquet"
    write_predictions(
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
    from oodcorr.core.digests import sha256_file, stat_key

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


def test_the_records_read_are_kept_for_their_provenance(tmp_path):
    """Every record the table is made of, once, for the scores' provenance.json: the libraries the
    evaluations recorded, counted (a record without them, written before they were kept, says so)."""
    from oodcorr.core.provenance import NOT_RECORDED, library_versions, scores_provenance
    from oodcorr.core.records import read_result

    paths = [_predictions(tmp_path, "t1"), _predictions(tmp_path, "t2")]
    kept: list = []
    df = collect(paths, keep_records=kept)
    assert len(kept) == len(df) == 2 and kept == [read_result(p) for p in paths]
    doc = scores_provenance(kept + [dict(kept[0], libraries=library_versions())])
    assert doc["evaluate"]["torch"] == {NOT_RECORDED: 2, library_versions()["torch"]: 1}
    assert doc["finetune"]["torch"] == {NOT_RECORDED: 1}  # one checkpoint ("ck"), its finetune's not recorded
    assert len(doc["aggregated_by"]["git_commit"]) == 40


def test_a_scores_table_without_its_seal_or_unreadable_is_named_with_the_way_out(tmp_path):
    """Rule aggregate_scores seals the table last: one without its seal (put there by hand, or by an
    earlier version) is refused, naming the seal and the way out (before: read as it was); one its job
    sealed that does not read is named too."""

    df = collect([_predictions(tmp_path, "t1")])
    pq, csv = tmp_path / "scores.parquet", tmp_path / "scores.csv"
    write_scores(df, str(pq), str(csv))
    with pytest.raises(ResultError) as e:
        read_scores(str(pq))
    assert str(e.value).startswith(f"{pq} has no seal ({tmp_path / '.scores.parquet.sha256'})")
    assert "deleting it is safe" in str(e.value) and "rule aggregate_scores makes it again" in str(e.value)
    seal([pq])
    pd.testing.assert_frame_equal(read_scores(str(pq)), df)
    pq.write_bytes(pq.read_bytes()[:200])
    seal([pq])  # its job wrote it so (a disk that lost the end of a write)
    with pytest.raises(ResultError, match=r"scores\.parquet: not a readable scores table.*deleting it is safe"):
        read_scores(str(pq))


def test_a_staged_scores_table_damaged_since_it_was_sealed_is_named_safe_to_delete(tmp_path):
    """Issue 47: the sentence named the table and Arrow's error, not that deleting it is safe; and a staged
    table changed but still readable (rows dropped by hand) was read as it was."""

    df = collect([_predictions(tmp_path, "t1"), _predictions(tmp_path, "t2")])
    pq, csv = tmp_path / ".staging" / "scores.parquet", tmp_path / ".staging" / "scores.csv"
    write_scores(df, str(pq), str(csv))
    seal([str(pq), str(csv)])  # as rule aggregate_scores does
    pd.testing.assert_frame_equal(read_scores(str(pq)), df)
    whole = pq.read_bytes()
    for damage in (lambda: pq.write_bytes(whole[:200]), lambda: df.iloc[:1].to_parquet(pq, index=False)):
        damage()
        with pytest.raises(ResultError) as e:
            read_scores(str(pq))
        msg = str(e.value)
        assert msg.startswith(f"{pq} changed after the job that made it wrote it"), msg
        assert "deleting it is safe" in msg and "rule aggregate_scores makes it again" in msg, msg
        assert "nothing is trained or evaluated again" in msg, msg


def test_a_staged_analysis_table_cut_short_stops_its_figure_with_the_way_out(tmp_path):
    """A staged partial_correlations.csv cut at a line end still parses (fewer rows, read as all of them):
    before, the heatmap was drawn from what was left. Now its seal names it, with the way out (issue 47)."""

    staged = tmp_path / "results/x/.staging/analysis/partial_correlations.csv"
    staged.parent.mkdir(parents=True)
    staged.write_text("model,run,x,y,r\n" + "".join(f"m,pooled,a{i},b{i},0.{i}\n" for i in range(1, 9)))
    seal([str(staged)])  # as rule partial_correlations does
    text = staged.read_text()
    staged.write_text(text[: text.index("a5")])  # cut at a line end, a kill half-way through a copy
    msg = run_rule_script(
        "plot",
        tmp_path,
        rule="heatmap",
        input=[str(staged)],
        output=[str(tmp_path / "m.png")],
        params=types.SimpleNamespace(kind="heatmap", method="pearson", residualiser="linear"),
        wildcards=types.SimpleNamespace(model="m"),
    )
    assert msg is not None and msg.startswith(f"oodcorr: {staged} changed after the job that made it wrote it"), msg
    assert "deleting it is safe" in msg and "rule partial_correlations makes it again" in msg, msg
    assert not (tmp_path / "m.png").exists()


# ---- records checked against where they sit (issue 25) -------------------------------------------
PLACES = {
    "predictions": "results/{exp}/eval/{model}/{indomain}/n{ntrain}/seed{seed}/step{step}/"
    "{testset}.predictions.parquet",
    "summary": "results/{exp}/eval/{model}/{indomain}/n{ntrain}/seed{seed}/{testset}.json",
    "checkpoint": "results/{exp}/finetune/{model}/{indomain}/n{ntrain}/seed{seed}/checkpoints/checkpoint-{step}",
}


def _places(exp="x", series=None):
    return {k: v.replace("{exp}", exp) for k, v in PLACES.items()} | {"series": series or {}}


def _evaluated(wd, step, testset, exp="x", seed=0, **kw):
    """A predictions file where the workflow keeps it, with the record evaluation writes (paths relative
    to the working folder ``wd``, as in the workflow)."""
    rel = _places(exp)["predictions"].format(model="m", indomain="d", ntrain=8, seed=seed, step=step, testset=testset)
    path = wd / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    rec = _record(rel, testset, step=step, **kw)
    rec.update(
        seed=seed,
        run_id=f"m/d/n8/seed{seed}",
        checkpoint=_places(exp)["checkpoint"].format(model="m", indomain="d", ntrain=8, seed=seed, step=step),
        eval_key=f"key-{exp}-{seed}-{step}-{testset}",
    )
    write_predictions(str(path), [0, 1], [0, 0], [True, False], torch.zeros(2, 2), ["a", "b"], ["a", "b"], rec)
    return rel


@pytest.mark.parametrize(
    "source, what",
    [
        ({"step": 5}, "another checkpoint's"),
        ({"testset": "t2"}, "another testset's"),
        ({"exp": "other"}, "another experiment's"),
        ({"seed": 1}, "another run's"),
    ],
)
def test_a_predictions_file_copied_over_another_is_refused(tmp_path, monkeypatch, source, what):
    """`cp` of another checkpoint's (testset's, experiment's, run's) predictions file over this one:
    aggregated as it was, a step (testset, run) would appear twice and this one vanish, or another
    experiment's score be used. Refused, naming the file and the way out, with or without the layout
    (`places`). (Before: aggregated as if it were the right one.)"""
    import shutil

    monkeypatch.chdir(tmp_path)
    here = [_evaluated(tmp_path, s, t) for s in (0, 5) for t in ("t1", "t2")]
    other = _evaluated(tmp_path, **{"step": 0, "testset": "t1", **source})
    target = here[0]  # step 0 on t1 of run m/d/n8/seed0 in experiment x
    assert collect(here)["step"].tolist() == [0, 0, 5, 5]
    shutil.copyfile(other, target)
    for with_layout in ({}, {"places": _places()}):
        with pytest.raises(ResultError) as e:
            collect(here, **with_layout)
        msg = str(e.value)
        assert msg.startswith(f"{target}: holds the evaluation of") and "copied over it?" in msg, what
        assert "delete it and run again: that evaluation runs again" in msg


def test_a_record_that_names_its_file_but_not_its_run_step_or_testset_is_refused(tmp_path, monkeypatch):
    """A record whose `predictions` path was made to match its new place, but whose run and step say
    otherwise (or whose checkpoint is another run's): with the layout, every field is checked."""
    import pyarrow.parquet as pq

    from oodcorr.core.records import META_KEY

    monkeypatch.chdir(tmp_path)
    rel = _evaluated(tmp_path, 0, "t1")
    table = pq.read_table(rel)
    for change in ({"step": 5}, {"run_id": "m/d/n8/seed1"}, {"checkpoint": "elsewhere/checkpoint-0"}):
        rec = json.loads(table.schema.metadata[META_KEY]) | change
        pq.write_table(table.replace_schema_metadata({META_KEY: json.dumps(rec).encode()}), rel)
        collect([rel])  # its `predictions` path is right: only the layout tells
        with pytest.raises(
            ResultError, match=r"but sits where the evaluation of run m/d/n8/seed0, step 0, testset 't1'"
        ):
            collect([rel], places=_places())


def _summary(wd, testset, records, exp="x"):
    rel = _places(exp)["summary"].format(model="m", indomain="d", ntrain=8, seed=0, testset=testset)
    write_json_atomic(wd / rel, {"testset": testset, "checkpoints": records})
    return rel


def test_unit_run_summaries_and_the_files_they_list_are_checked_against_their_place(tmp_path, monkeypatch):
    """evaluation.unit run: a summary copied over another testset's, and a predictions file it lists
    replaced by another step's: both refused. (Before: the summary's records were aggregated as they
    were, and the analysis then read the replaced per-example file.)"""
    import shutil

    from oodcorr.core.records import read_result

    monkeypatch.chdir(tmp_path)
    summaries = []
    for t in ("t1", "t2"):
        recs = [read_result(_evaluated(tmp_path, s, t)) for s in (0, 5)]
        summaries.append(_summary(tmp_path, t, recs))
    assert len(collect(summaries, places=_places())) == 4
    shutil.copyfile(summaries[1], tmp_path / "saved.json")
    shutil.copyfile(summaries[0], summaries[1])  # t1's summary where t2's belongs
    with pytest.raises(ResultError, match=rf"^{summaries[1]}: holds run m/d/n8/seed0, step 0, testset 't1'.*t2"):
        collect(summaries, places=_places())
    shutil.copyfile(tmp_path / "saved.json", summaries[1])
    step0, step5 = (
        _places()["predictions"].format(model="m", indomain="d", ntrain=8, seed=0, step=s, testset="t2") for s in (0, 5)
    )
    shutil.copyfile(step5, step0)
    with pytest.raises(ResultError) as e:
        collect(summaries, places=_places())
    assert str(e.value).startswith(f"{step0}: holds the evaluation of run m/d/n8/seed0, step 5, testset 't2'")
    assert f"not the one {summaries[1]} lists for it" in str(e.value) and f"delete it and {summaries[1]}" in str(
        e.value
    )


def test_a_series_record_must_name_the_configured_checkpoint(tmp_path, monkeypatch):
    """A series checkpoint scored from another directory than the config gives for its step."""
    monkeypatch.chdir(tmp_path)
    rel = _places()["predictions"].format(model="m", indomain="d", ntrain=0, seed=0, step=100, testset="t1")
    (tmp_path / rel).parent.mkdir(parents=True)
    rec = _record(rel, "t1", step=100) | {"n_train": 0, "run_id": "m/d/n0/seed0", "checkpoint": "/ckpts/step200"}
    write_predictions(
        str(tmp_path / rel), [0, 1], [0, 0], [True, False], torch.zeros(2, 2), ["a", "b"], ["a", "b"], rec
    )
    series = {"m": {"100": "/ckpts/step100", "200": "/ckpts/step200"}}
    with pytest.raises(ResultError, match=r"\(checkpoint /ckpts/step200\), but sits where"):
        collect([rel], places=_places(series=series))
    rec["checkpoint"] = "/ckpts/step100/"  # the same directory, written another way
    write_predictions(
        str(tmp_path / rel), [0, 1], [0, 0], [True, False], torch.zeros(2, 2), ["a", "b"], ["a", "b"], rec
    )
    assert collect([rel], places=_places(series=series))["step"].tolist() == [100]


def test_a_truncated_staged_scores_table_stops_the_report_tables_with_a_sentence(tmp_path):
    staged = tmp_path / "results/x/.staging/scores.parquet"
    staged.parent.mkdir(parents=True)
    pd.DataFrame({"accuracy": [0.5] * 100}).to_parquet(staged)
    staged.write_bytes(staged.read_bytes()[:200])
    seal([staged])  # as its job left it: sealed, but cut short
    msg = run_rule_script(
        "report_tables",
        tmp_path,
        rule="accuracy_table",
        input=[str(staged)],
        output=types.SimpleNamespace(html=str(tmp_path / "a.html"), csv=str(tmp_path / "a.csv")),
        config={"experiment": "x"},
    )
    assert msg is not None and msg.startswith(f"oodcorr: {staged}: not a readable scores table ("), msg
    assert msg.endswith(
        "deleting it is safe: delete it and run again, and rule aggregate_scores makes it again from the evaluations "
        "(nothing is trained or evaluated again)"
    ), msg


def test_an_evaluation_of_a_swapped_tokenised_testset_names_the_cache_to_delete(tmp_path, monkeypatch):
    """An evaluation that read another testset's tokenised cache (two caches swapped) wrote its record
    in its own place, naming its own file but the other testset. Deleting the predictions file alone
    would evaluate the same swapped cache again: the way out names the cache. (Before: "delete it and
    run again", which repeated the error.)"""
    import pyarrow.parquet as pq

    from oodcorr.core.records import META_KEY

    monkeypatch.chdir(tmp_path)
    rel = _evaluated(tmp_path, 0, "t1")
    table = pq.read_table(rel)
    rec = json.loads(table.schema.metadata[META_KEY]) | {"testset": "t2"}  # as the swapped cache said
    pq.write_table(table.replace_schema_metadata({META_KEY: json.dumps(rec).encode()}), rel)
    with pytest.raises(ResultError) as e:
        collect([rel], places=_places())
    msg = str(e.value)
    assert msg.startswith(f"{rel}: holds run m/d/n8/seed0, step 0, testset 't2'")
    cache = "results/x/cache/tokenized/m/t1.pt"
    assert f"Delete {cache}, results/x/cache/tokenized/m/t1.info.json and {rel}" in msg
    assert "copied over it?" not in msg  # it was written here, by an evaluation
