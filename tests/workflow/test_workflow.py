"""The workflow end to end through Snakemake, on the micro config, in a temporary folder."""

import json
import os
import re
import statistics
import subprocess
import sys
import time

import pandas as pd
import pytest
import yaml

from helpers import (
    REPO,
    SNAKEMAKE,
    TRACKERS,
    copy_run,
    finished_micro,
    job_counts,
    micro_config,
    smk,
    tensorboard_scalars,
    wandb_runs,
)

pytestmark = pytest.mark.slow


R = "results/micro"  # config/micro.yaml's experiment folder
RUN = "micro-opt/synth/n64/seed0"
STEPS = [0, 4, 8, 12, 16]


@pytest.fixture(scope="module")
def micro_run(tmp_path_factory):
    """config/micro.yaml as shipped (evaluation.unit checkpoint), logging to TensorBoard, MLflow and W&B,
    finished. The tests that run in this folder leave it finished (a report, a file outside the
    experiment's jobs, a run that finds nothing to do); the others work on a copy (copy_run)."""
    return finished_micro(tmp_path_factory, "micro", "checkpoint", TRACKERS)


@pytest.fixture(scope="module")
def micro_run_unit(tmp_path_factory):
    """config/micro.yaml with evaluation.unit run: micro_run's data, model, finetune and tokenised
    testsets, every evaluation made again by unit run's jobs."""
    return finished_micro(tmp_path_factory, "micro-run-unit", "run", evaluated_in=("micro", "checkpoint", TRACKERS))


def test_end_to_end_outputs(micro_run):
    wd, cfg, _ = micro_run
    scores = pd.read_csv(wd / R / "scores.csv")
    assert sorted(scores["step"].unique()) == STEPS
    assert len(scores) == len(STEPS) * 3  # one run x steps x (in-domain + 2 OOD)
    assert set(scores["role"]) == {"in-domain", "ood"}
    assert scores.loc[scores.role == "in-domain", "testset"].unique().tolist() == ["synth-test"]
    assert scores["accuracy"].between(0, 1).all() and (scores["n"] == 60).all()
    assert (scores["accuracy"] == scores["n_correct"] / scores["n"]).all()
    # the CSV holds the same table
    pd.testing.assert_frame_equal(pd.read_parquet(wd / R / "scores.parquet"), scores, check_dtype=False)

    # one evaluation job per checkpoint x testset: its predictions file holds its record
    from oodcorr.core.records import read_result

    path = wd / R / f"eval/{RUN}/step8/synth-overlap.predictions.parquet"
    one = read_result(path)
    assert one["predictions"] == str(path.relative_to(wd)) and one["step"] == 8
    pred = pd.read_parquet(path)
    assert len(pred) == one["n"] == 60 and pred["correct"].mean() == pytest.approx(one["accuracy"])
    assert one["fingerprint"].startswith("synthetic:") and one["run_id"] == RUN
    job = one["job_timing_s"]  # stages, then two moments from the process's start (issue 24)
    assert one["load"] == "fresh" and set(job) == {"startup", "imports", "cache", "ready", "first_batch"}
    assert job["startup"] + job["imports"] <= job["ready"] <= job["first_batch"]
    assert set(one["timing_s"]) == {"model", "forward"}  # (the write is timed after the record is stored)
    row = scores[(scores.testset == "synth-overlap") & (scores.step == 8)]
    assert row["accuracy"].item() == one["accuracy"] and row["predictions"].item() == one["predictions"]
    assert not list((wd / R / "eval").rglob("*.json"))  # no job summaries in unit checkpoint
    # what made it (issue 45): each record names the libraries its evaluation and its finetune ran with,
    # and the published provenance.json counts them, with the code (this checkout) that aggregated them
    from oodcorr.core.provenance import library_versions

    libs = library_versions()
    assert one["libraries"] == one["finetune_libraries"] == libs and None not in libs.values()
    prov = json.loads((wd / R / "provenance.json").read_text())
    assert prov["evaluate"] == {k: {v: 15} for k, v in libs.items()}  # 5 checkpoints x 3 testsets
    assert prov["finetune"] == {k: {v: 5} for k, v in libs.items()}  # 5 checkpoints
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True)
    assert prov["aggregated_by"]["git_commit"] == head.stdout.strip()
    logs = sorted((wd / R / "logs/eval").rglob("*.log"))
    assert len(logs) == 15 and all(p.stat().st_size > 0 for p in logs)  # a log per evaluation job

    pairs = pd.read_csv(wd / R / "analysis/partial_correlations.csv")
    assert (pairs.run == "pooled").sum() == 1  # one pooled row per model and pair
    pairs = pairs[pairs.run != "pooled"].reset_index(drop=True)
    assert len(pairs) == 1 and {pairs.x[0], pairs.y[0]} == {"synth-overlap", "synth-negation"}
    assert pairs.n[0] == len(STEPS)
    assert pairs.ex_note.isna().all() and pairs.ex_ci_low.notna().all()  # example-level bootstrap ran
    png = (wd / R / "analysis/heatmaps/micro-opt.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000
    for f in ("agreement.csv", "heatmap_grid.png", "learning_curves/micro-opt.png", "scatter/micro-opt.png"):
        assert (wd / R / "analysis" / f).stat().st_size > 0, f
    for log in (f"logs/finetune/{RUN}.log", "logs/models/micro-opt.log"):
        assert (wd / R / log).stat().st_size > 0
    assert not (wd / "results/scores.csv").exists() and not (wd / "logs").exists()  # all under results/micro


def _predictions(wd):
    return {p.relative_to(wd): pd.read_parquet(p) for p in sorted((wd / R / "eval").rglob("*.predictions.parquet"))}


def test_both_units_write_the_same_files(micro_run, micro_run_unit):
    """Unit run (a job per run x testset, the model loaded once) writes the same predictions
    files, bit for bit, and the same scores as unit checkpoint, from the same checkpoints (the unit
    run's evaluations were made again: each later checkpoint loaded in place); and its job summaries."""
    a, b = _predictions(micro_run[0]), _predictions(micro_run_unit[0])
    assert sorted(a) == sorted(b) and len(a) == 15
    for k in a:
        pd.testing.assert_frame_equal(a[k], b[k])
    sa, sb = (pd.read_csv(wd / R / "scores.csv") for wd in (micro_run[0], micro_run_unit[0]))
    pd.testing.assert_frame_equal(sa, sb)
    wd = micro_run_unit[0]
    summary = json.loads((wd / R / f"eval/{RUN}/synth-overlap.json").read_text())
    assert summary["steps"] == STEPS and summary["run_id"] == RUN
    assert [r["load"] for r in summary["checkpoints"]] == ["fresh"] + ["in place"] * 4
    assert set(summary["timing_s"]) == {"startup", "imports", "cache", "checkpoints", "ready", "first_batch"}
    assert len(list((wd / R / "logs/eval").rglob("*.log"))) == 3  # a job per testset


def test_switching_units_recomputes_no_evaluation(micro_run_unit, tmp_path):
    """A finished unit-run experiment planned in unit checkpoint: every predictions file is
    there, so no evaluation job runs (the aggregation reads other files, so it and the
    analysis are redone); and back in unit run the jobs keep every predictions file."""
    import shutil

    wd = tmp_path / "switch"
    shutil.copytree(micro_run_unit[0], wd, symlinks=True)
    cfg = dict(micro_run_unit[1], evaluation=dict(micro_run_unit[1]["evaluation"], unit="checkpoint"))
    path = wd / "micro-checkpoint.yaml"
    path.write_text(yaml.safe_dump(cfg))
    dry = smk(wd, path, "-n")
    assert dry.returncode == 0, dry.stderr[-3000:]
    counts = job_counts(dry.stdout)
    assert "evaluate" not in counts and "finetune" not in counts and counts["aggregate_scores"] == 1
    before = {p: p.stat().st_mtime_ns for p in (wd / R / "eval").rglob("*.parquet")}
    summaries = sorted((wd / R / "eval").rglob("*.json"))
    for f in summaries:  # back to unit run with its summaries gone: its jobs run...
        f.unlink()
    res = smk(wd, micro_run_unit[2], *[str(f.relative_to(wd)) for f in summaries])
    assert res.returncode == 0, res.stderr[-3000:]
    assert {p: p.stat().st_mtime_ns for p in (wd / R / "eval").rglob("*.parquet")} == before  # ...and keep all
    assert "already holds this evaluation; kept" in (wd / R / f"logs/eval/{RUN}/synth-test.log").read_text()


def test_report_renders(micro_run):
    wd, _, cfg_path = micro_run
    res = smk(wd, cfg_path, "--report", str(wd / R / "report.html"))
    assert res.returncode == 0, res.stderr[-3000:]
    assert "Missing metadata" not in res.stderr + res.stdout
    html = (wd / R / "report.html").read_text(encoding="utf-8", errors="replace")
    # numbered categories: the report's menu sorts them, so the answer across models comes first
    for text in (
        "The answer first",
        "1 The answer",
        "2 Heatmaps per model",
        "3 Tables",
        "4 Learning curves",
        "5 Accuracy",
        "6 Training loss",
        "7 Residualiser fits",
        "8 Provenance",
        "accuracy.html",
        "explorer.html",
        "answer.txt",
    ):
        assert text in html, text
    # the landing text says the answer, read from the published answer.txt (no key in the config)
    answer = (wd / R / "analysis/answer.txt").read_text().splitlines()
    assert answer and answer[0].startswith("the answer, ") and "in-domain synth-test (n_train=64): 1 pair" in answer[0]
    assert "in-domain synth-test (n_train=64): 1 pair" in html
    # and what made it, read from the published provenance.json: the code that aggregated, the jobs' libraries
    commit = json.loads((wd / R / "provenance.json").read_text())["aggregated_by"]["git_commit"]
    assert "aggregated_by" in html and commit in html and "transformers" in html
    assert (wd / R / "analysis/explorer.html").stat().st_size > 0


def test_accuracy_table_is_the_scores_per_checkpoint_and_testset(micro_run):
    wd = micro_run[0]
    scores = pd.read_csv(wd / R / "scores.csv")
    table = pd.read_csv(wd / R / "accuracy.csv")
    assert list(table.columns) == [
        "model",
        "in_domain",
        "n_train",
        "seed",
        "step",
        "synth-test",
        "synth-negation",
        "synth-overlap",
    ]  # the in-domain set first
    assert table["step"].tolist() == STEPS
    for _, row in scores.iterrows():
        assert table.loc[table.step == row.step, row.testset].item() == row.accuracy
    page = (wd / R / "accuracy.html").read_text()
    assert "micro-opt, in-domain synth, n_train 64, seed 0" in page and "in-domain, n=60" in page
    assert all(f"<td>{a:.3f}</td>" in page for a in scores["accuracy"])


# ---- the published set: checked, republished, never half replaced; one writer (issue 25) ----------
def _published(wd) -> dict:
    """Every published file as a reader sees it (through the links), by path; None where one is missing."""
    root = wd / R
    files = ["scores.parquet", "scores.csv", "accuracy.html", "accuracy.csv"]
    files += [str(p.relative_to(root)) for p in (root / "analysis").rglob("*") if p.is_file()]
    return {rel: (root / rel).read_bytes() if (root / rel).is_file() else None for rel in sorted(files)}


def test_a_published_table_edited_by_hand_is_named_and_published_again(micro_run, tmp_path):
    """A row added to results/<experiment>/scores.csv by hand: the next start names the file and
    publishes the set again from .staging/, keeping the edited one aside. (Before: "Nothing to be
    done", and the edited table stayed as the result.)"""
    wd = copy_run(micro_run, tmp_path, "edited")
    published = _published(wd)
    with open(wd / R / "scores.csv", "a") as fh:
        fh.write("micro-opt,synth,64,0,micro-opt/synth/n64/seed0,20,step,synth-test,in-domain,0.99,60,59\n")
    dry = smk(wd, micro_run[2], "-n")
    assert dry.returncode == 0, dry.stderr[-3000:]
    assert "oodcorr warning: the published results of experiment 'micro' are not what was published" in dry.stderr
    assert f"{R}/scores.csv differs from what was published" in dry.stderr
    # a dry run changes nothing (issue 53): published.json stays, so Snakemake lists no job; the warning says
    assert "Nothing to be done" in dry.stdout + dry.stderr
    assert f"this command only looks, so it changes nothing in {R}: a run removes {R}/published.json" in dry.stderr
    res = smk(wd, micro_run[2])
    assert res.returncode == 0, res.stderr[-3000:]
    assert _published(wd) == published  # the set as it was published, the edit gone from it
    kept = list((wd / R / ".published").glob("kept-*/scores.csv"))
    assert len(kept) == 1 and kept[0].read_bytes().endswith(b",0.99,60,59\n")  # and kept aside
    again = smk(wd, micro_run[2], "-n")
    assert "Nothing to be done" in again.stdout + again.stderr and "oodcorr warning: the published" not in again.stderr


def test_a_staged_table_cut_short_before_publishing_is_not_published(micro_run, tmp_path):
    """The staged scores.csv truncated after its job wrote it: publishing stops naming it and what to
    do, and the published set stays whole, as it was. (Before: published beside a whole parquet.)"""
    wd = copy_run(micro_run, tmp_path, "cut")
    published = _published(wd)
    staged = wd / R / ".staging/scores.csv"
    staged.write_bytes(staged.read_bytes()[:300])
    res = smk(wd, micro_run[2], "--forcerun", "publish_results")
    out = res.stdout + res.stderr
    assert res.returncode != 0
    assert f"{R}/.staging/scores.csv changed after the job that made it wrote it" in out
    assert f"Delete {R}/.staging/scores.csv and run again" in out
    assert _published(wd) == published
    staged.unlink()  # as the message says: the aggregation runs again, then the set is published
    res = smk(wd, micro_run[2])
    assert res.returncode == 0, res.stderr[-3000:]
    assert _published(wd) == published


def test_a_publish_killed_half_way_leaves_the_previous_set_whole(micro_run, tmp_path):
    """SIGKILL of the publish_results job half-way (after its second rename), under Snakemake, which
    deleted the rule's declared output before the job: every published file is still there, byte for
    byte the previous set; the next start says the last publish did not finish, and the run
    publishes. (Before: the published files were the declared outputs, so they were gone or mixed.)"""
    from hooks.sitecustomize import KILL_PUBLISH_ENV, PYTHONPATH_ENTRY

    wd = copy_run(micro_run, tmp_path, "killed")
    published = _published(wd)
    record = wd / R / "published.json"
    version = json.loads(record.read_text())["version"] if record.exists() else None
    env = {
        KILL_PUBLISH_ENV: "2",
        "PYTHONPATH": os.pathsep.join(p for p in (PYTHONPATH_ENTRY, os.environ.get("PYTHONPATH")) if p),
    }
    res = smk(wd, micro_run[2], "--forcerun", "publish_results", env=env)
    assert res.returncode != 0 and "Error in rule publish_results" in res.stdout + res.stderr
    assert _published(wd) == published
    assert not (wd / R / "published.json").exists()  # Snakemake deleted the declared output
    dry = smk(wd, micro_run[2], "-n")
    assert f"{R}/published.json is missing: the last publish did not finish" in dry.stderr
    assert f"Readers see version {version}," in dry.stderr and "whole and as published" in dry.stderr
    res = smk(wd, micro_run[2])
    assert res.returncode == 0, res.stderr[-3000:]
    assert _published(wd) == published and (wd / R / "published.json").exists()
    assert not list((wd / R / ".published").glob(".new-*"))  # what the kill left is cleared


def test_two_runs_from_two_checkouts_sharing_results_are_one_writer_at_a_time(micro_run, tmp_path):
    """Two working folders (checkouts), each with its own .snakemake/ (so Snakemake's own lock does not
    see the other), whose results/ is one shared folder: while the first run publishes, the second is
    refused at once, naming the first's PID and config, and changes nothing; it also says that another
    config wrote the experiment. (Before: both ran, publishing over each other.)"""
    import signal

    from hooks.sitecustomize import HOLD_PUBLISH_ENV, PYTHONPATH_ENTRY

    one = copy_run(micro_run, tmp_path, "one")
    two = tmp_path / "two"
    two.mkdir()
    (two / "results").symlink_to(one / "results")
    cfg_two = two / "micro.yaml"  # its own copy, edited (a batch size: reruns nothing)
    cfg_two.write_text(yaml.safe_dump(dict(micro_run[1], evaluation=dict(micro_run[1]["evaluation"], batch_size=7))))
    go = tmp_path / "go"
    env = {
        **os.environ,
        HOLD_PUBLISH_ENV: str(go),
        "PYTHONPATH": os.pathsep.join(p for p in (PYTHONPATH_ENTRY, os.environ.get("PYTHONPATH")) if p),
    }
    cmd = [SNAKEMAKE, "-s", str(REPO / "Snakefile"), "-d", str(one), "--configfile", str(micro_run[2]), "--cores", "1"]
    first = subprocess.Popen(
        [*cmd, "--forcerun", "publish_results"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        waiting = tmp_path / "go.waiting"
        deadline = time.time() + 300
        while not waiting.exists():
            assert first.poll() is None, first.stdout.read()[-3000:]
            assert time.time() < deadline, "the first run never started publishing"
            time.sleep(0.1)
        before = {p: p.stat().st_mtime_ns for p in (one / R).rglob("*") if p.is_file() and "/logs/" not in str(p)}
        second = smk(two, cfg_two, "--forcerun", "publish_results")
        out = second.stdout + second.stderr
        assert second.returncode != 0, out[-3000:]
        assert f"oodcorr: experiment folder {R} is in use by another run of the workflow" in out
        assert f"PID {first.pid} on host" in out and f"config {micro_run[2].resolve()}" in out
        assert f"kill {first.pid}" in out and "Error in rule" not in out  # refused before any job
        assert f"was last written by config {micro_run[2].resolve()}" in out  # and another config wrote it
        after = {p: p.stat().st_mtime_ns for p in (one / R).rglob("*") if p.is_file() and "/logs/" not in str(p)}
        assert after == before
        go.write_text("")
        out_first, _ = first.communicate(timeout=600)
        assert first.returncode == 0, out_first[-3000:]
    finally:
        if first.poll() is None:
            first.send_signal(signal.SIGKILL)
            first.wait()


def test_report_of_an_experiment_that_has_not_run_says_which_config_to_pass(micro_run):
    """Without --configfile the report is the embedded default's, which has not run here: one error
    naming the experiments that have, instead of a line per missing file and a failure."""
    wd = micro_run[0]
    res = subprocess.run(
        [SNAKEMAKE, "-s", str(REPO / "Snakefile"), "-d", str(wd), "--report", str(wd / "r.html")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = res.stdout + res.stderr
    assert res.returncode != 0 and not (wd / "r.html").exists()
    assert "--report: experiment 'default'" in out and "experiments with results here: micro" in out
    assert "--configfile" in out and "Missing metadata" not in out


def test_training_loss_goes_to_tensorboard_in_the_run_folder(micro_run):
    """finetune.report_to names TensorBoard: the Trainer's logged losses are TensorBoard scalars under
    the run's folder (read by TensorBoard's own reader), the same as the manifest's history."""
    wd = micro_run[0]
    run_dir = wd / R / "finetune" / RUN
    scalars = tensorboard_scalars(run_dir / "tensorboard")
    history = json.loads((run_dir / "manifest.json").read_text())["loss_history"]
    assert len(history) == 16  # 16 steps, logged every max(1, 16 // 20) = 1
    assert [s for s, _ in scalars["train/loss"]] == [h["step"] for h in history]
    assert [v for _, v in scalars["train/loss"]] == pytest.approx([h["loss"] for h in history], rel=1e-6)
    assert not list((run_dir / "checkpoints").glob("runs"))  # not in the checkpoints' folder
    png = (wd / R / "analysis/training_loss/micro-opt.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000


def test_each_tracker_holds_the_loss_and_every_checkpoints_scores(micro_run, monkeypatch):
    """A config naming TensorBoard, MLflow and W&B: each one's own files, read by its own reader, hold
    the training loss and every checkpoint's in-domain and OOD accuracy (with its interval) at the
    checkpoint's step, once; and the answer's files (issue 46)."""
    from mlflow.tracking import MlflowClient

    wd = micro_run[0]
    run_dir = wd / R / "finetune" / RUN
    history = json.loads((run_dir / "manifest.json").read_text())["loss_history"]
    scores = pd.read_csv(wd / R / "scores.csv")
    want = {(f"{r.role}/{r.testset}/accuracy", r.step): r.accuracy for r in scores.itertuples()}
    assert len(want) == 15 and {t.split("/")[0] for t, _ in want} == {"in-domain", "ood"}

    tb = tensorboard_scalars(run_dir / "tensorboard")
    assert {(tag, s): v for tag, pts in tb.items() if tag.endswith("/accuracy") for s, v in pts} == pytest.approx(want)
    assert all(len(tb[tag]) == len(STEPS) for tag in tb if tag.endswith(("accuracy", "_ci_low", "_ci_high")))

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 reads a file store only when asked to
    client = MlflowClient(tracking_uri=f"file:{wd / R / 'mlruns'}")
    exp = client.get_experiment_by_name("oodcorr-micro")
    (run,) = client.search_runs([exp.experiment_id], filter_string=f"tags.`oodcorr.run` = 'micro/{RUN}'")
    assert run.info.run_name == RUN  # the finetune's own run: its loss and its scores together
    loss = client.get_metric_history(run.info.run_id, "loss")
    assert [(m.step, m.value) for m in loss] == [(h["step"], pytest.approx(h["loss"], rel=1e-6)) for h in history]
    for (tag, step), v in want.items():
        assert [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, tag)
                if m.step == step] == [(step, pytest.approx(v))], tag  # fmt: skip
    (answer,) = client.search_runs([exp.experiment_id], filter_string="tags.`oodcorr.run` = 'micro: the answer'")
    assert {a.path for a in client.list_artifacts(answer.info.run_id)} >= {"agreement.csv", "explorer.html"}

    runs = {r["job_type"]: r for r in wandb_runs(run_dir)}
    assert set(runs) == {"finetune", "scores"} and {r["group"] for r in runs.values()} == {f"micro/{RUN}"}
    loss = [(row["train/global_step"], row["train/loss"]) for row in runs["finetune"]["history"] if "train/loss" in row]
    assert loss == [(h["step"], pytest.approx(h["loss"], rel=1e-6)) for h in history]
    got = {
        (k, row["checkpoint_step"]): v
        for row in runs["scores"]["history"]
        for k, v in row.items()
        if k in {t for t, _ in want}
    }
    assert got == pytest.approx(want)
    (answer,) = wandb_runs(wd / R / "trackers")
    assert answer["job_type"] == "answer" and "agreement.csv" in answer["artifacts"][0]["files"]


def test_a_tracker_that_cannot_be_reached_stops_the_run_while_planning(tmp_path):
    """MLflow named and its server not answering: the run stops before any job, with the sentence
    naming finetune.report_to and MLFLOW_TRACKING_URI (not an hour later, after the training)."""
    cfg = micro_config()
    cfg["finetune"]["report_to"] = TRACKERS
    path = tmp_path / "micro.yaml"
    path.write_text(yaml.safe_dump(cfg))
    res = smk(tmp_path, path, env={"MLFLOW_TRACKING_URI": "http://127.0.0.1:9"})
    assert res.returncode != 0
    assert "finetune.report_to: mlflow: the tracking server MLFLOW_TRACKING_URI=http://127.0.0.1:9 cannot be" in (
        res.stdout + res.stderr
    )
    assert not (tmp_path / "results").exists()  # no job ran


def test_editing_report_to_reruns_nothing(micro_run, tmp_path):
    wd, cfg, _ = micro_run
    path = tmp_path / "micro.yaml"
    path.write_text(yaml.safe_dump(dict(cfg, experiment="micro", finetune=dict(cfg["finetune"], report_to="none"))))
    dry = smk(wd, path, "-n")
    assert dry.returncode == 0, dry.stderr[-3000:]
    assert "rule finetune:" not in dry.stdout and "rule evaluate:" not in dry.stdout


def test_budget_reads_measured_costs_of_finished_jobs(micro_run):
    """The budget's measurements: the finetune's seconds and each evaluation's timing, by device."""
    from oodcorr.core.records import read_result
    from oodcorr.launch.budget import measured_costs
    from oodcorr.planning.plan import load
    from oodcorr.planning.schema import read_config

    wd, _, cfg_path = micro_run
    here = os.getcwd()
    os.chdir(wd)
    try:
        measured = measured_costs(load(read_config(cfg_path), REPO, [cfg_path]))
    finally:
        os.chdir(here)
    man = json.loads((wd / R / f"finetune/{RUN}/manifest.json").read_text())
    assert man["device"] == "cpu" and measured[("finetune", "micro-opt", None, "cpu")] == man["seconds"]
    recs = [read_result(wd / R / f"eval/{RUN}/step{k}/synth-negation.predictions.parquet") for k in STEPS]
    # the job's stages count once, its moments (ready, first_batch: seconds since its start) not at all
    want = statistics.median(
        sum(r["timing_s"].values()) + sum(r["job_timing_s"][k] for k in ("startup", "imports", "cache")) for r in recs
    )
    assert measured[("evaluate", "micro-opt", "synth-negation", "cpu")] == pytest.approx(want)
    assert not any(k[3] == "gpu" for k in measured)  # CPU jobs never count as GPU measurements


@pytest.mark.parametrize("unit", ["checkpoint", "run"])
def test_adding_a_testset_schedules_only_its_evaluations(micro_run, micro_run_unit, unit, tmp_path):
    run = micro_run if unit == "checkpoint" else micro_run_unit
    wd, cfg = copy_run(run, tmp_path, "plus"), run[1]  # a copy: the module's run stays as made, for the tests after
    before = {
        p: p.stat().st_mtime_ns
        for p in (wd / R).rglob("*")
        if p.is_file()
        and "/analysis/" not in str(p)
        # the aggregation's outputs (and their seals)
        and not p.name.startswith(("scores.", "accuracy.", "provenance.", ".scores.", ".accuracy.", ".provenance."))
        and "/logs/analyse/" not in str(p)
        # the published set and its record, republished; the run's lock, config record and record of runs
        and "/.published/" not in str(p)
        and p.name not in ("published.json", "experiment.lock", "experiment.json", ".runs.json")
        # a checkpoint's verification record, made again once: this folder is a copy, so every file's inode
        # differs from the one the record names (tests/helpers.py: finished_micro)
        and p.name != ".oodcorr_verified.json"
        # the aggregation logs the added testset's points to the trackers: their record of what each got,
        # and the stores whose clients rewrite their run records (only new points: tests/jobs/test_tracking.py)
        and p.name != "trackers.json"
        and not any(part in ("mlruns", "wandb", "trackers") for part in p.relative_to(wd / R).parts)
    }
    cfg2 = dict(cfg, ood_testsets=cfg["ood_testsets"] + ["synth-passive"])
    cfg2_path = wd / "micro_plus.yaml"
    cfg2_path.write_text(yaml.safe_dump(cfg2))

    dry = smk(wd, cfg2_path, "-n")
    assert dry.returncode == 0, dry.stderr[-3000:]
    counts = job_counts(dry.stdout)
    assert "finetune" not in counts and "build_tiny_model" not in counts
    # unit checkpoint: a job per checkpoint of the run; unit run: one job (all 5 checkpoints)
    assert counts["evaluate"] == (5 if unit == "checkpoint" else 1)
    assert counts["tokenize_testset"] == 1 and counts["prepare_dataset"] == 1
    evals = re.findall(r"rule evaluate:\n(?:[^\n]*\n)*?\s+wildcards: ([^\n]*)", dry.stdout)
    assert len(evals) == counts["evaluate"] and all("testset=synth-passive" in w for w in evals)

    run = smk(wd, cfg2_path)
    assert run.returncode == 0, run.stderr[-3000:]
    after = {p: p.stat().st_mtime_ns for p in (wd / R).rglob("*") if p.is_file()}
    changed = sorted(str(p.relative_to(wd / R)) for p, t in before.items() if after[p] != t)
    assert changed == []  # nothing but the aggregation and analysis rewritten
    new = sorted(
        str(p.relative_to(wd / R / "eval")) for p in set(after) - set(before) if p.is_relative_to(wd / R / "eval")
    )
    assert new == sorted(
        [f"{RUN}/step{k}/synth-passive.predictions.parquet" for k in STEPS]
        + ([f"{RUN}/synth-passive.json"] if unit == "run" else [])
    )
    scores = pd.read_csv(wd / R / "scores.csv")
    assert len(scores) == 5 * 4
    pairs = pd.read_csv(wd / R / "analysis/partial_correlations.csv")
    assert len(pairs[pairs.run != "pooled"]) == 3


def _files(root) -> dict:
    """Every file and folder under ``root``: its bytes (None for a folder) and mtime, by path."""
    return {
        str(p.relative_to(root)): (None if p.is_dir() else p.read_bytes(), p.lstat().st_mtime_ns)
        for p in sorted(root.rglob("*"))
    }


def test_looking_changes_nothing_in_the_results(micro_run, tmp_path, monkeypatch):
    """A finished experiment whose published table was edited by hand (so its set is to be published
    again) and whose config gained a testset: a dry run, a summary, a list of rules, a graph, a report
    (beyond its own file), `oodcorr budget` and `oodcorr design` leave every file of results/ as it was,
    bytes and mtimes, and take no lock; the dry run says that a run would publish again. (Before:
    the dry run took the experiment's lock and deleted published.json.)"""
    from oodcorr.cli import main

    wd = copy_run(micro_run, tmp_path, "looking")
    with open(wd / R / "scores.csv", "a") as fh:
        fh.write("micro-opt,synth,64,0,micro-opt/synth/n64/seed0,20,step,synth-test,in-domain,0.99,60,59\n")
    cfg = micro_run[1]
    plus = wd / "micro_plus.yaml"
    plus.write_text(yaml.safe_dump(dict(cfg, ood_testsets=cfg["ood_testsets"] + ["synth-passive"])))
    before = _files(wd / R)
    looks = [["-n"], ["--summary"], ["--list"], ["--dag"], ["--report", str(tmp_path / "report.html")]]
    for look in looks:
        res = smk(wd, plus, *look)
        assert _files(wd / R) == before, look
        assert "oodcorr warning: the published results of experiment 'micro' are not what was" in res.stderr, look
    monkeypatch.chdir(wd)
    assert main(["budget", "--configfile", str(plus), "--workflow", str(REPO), "--out", str(tmp_path / "b")]) == 0
    design = ["design", "--configfile", str(plus), "--workflow", str(REPO), "--out", str(tmp_path / "d")]
    assert main([*design, "--studies", "30", "--effects", "0", "0.6", "--phi", "0.5", "--workers", "1"]) == 0
    assert _files(wd / R) == before
    # the config as it was: the dry run says that a run would publish the set again, and still changes nothing
    dry = smk(wd, micro_run[2], "-n")
    assert dry.returncode == 0 and "oodcorr warning: this command only looks, so it changes nothing" in dry.stderr
    assert _files(wd / R) == before


def test_runs_with_different_checkpoint_schedules_share_the_evaluate_rule(tmp_path):
    """A second model saving at other steps: still the one rule `evaluate`, a job per
    checkpoint of each run (5 + 4), each writing exactly its step's file."""
    cfg = micro_config()
    cfg["models"].append(dict(cfg["models"][0], name="micro-opt-b", finetune={"checkpoints": {"steps": [6, 10, 16]}}))
    path = tmp_path / "two.yaml"
    path.write_text(yaml.safe_dump(cfg))
    dry = smk(tmp_path, path, "-n")
    assert dry.returncode == 0, dry.stderr[-3000:]
    counts = job_counts(dry.stdout)
    assert counts["evaluate"] == (5 + 4) * 3 and not any(k.startswith("evaluate_") for k in counts)
    jobs = re.findall(
        r"rule evaluate:\n(?:[^\n]*\n)*?\s+output: ([^\n]*)\n(?:[^\n]*\n)*?\s+wildcards: "
        r"([^\n]*)",
        dry.stdout,
    )
    steps = {}
    for output, wildcards in jobs:
        model = re.search(r"model=([^,]+)", wildcards).group(1)
        step = re.search(r"step=(\d+)", wildcards).group(1)
        assert output.endswith(
            f"/step{step}/" + re.search(r"testset=(\S+)", wildcards).group(1) + ".predictions.parquet"
        )
        steps.setdefault(model, set()).add(int(step))
    assert steps == {"micro-opt": set(STEPS), "micro-opt-b": {0, 6, 10, 16}}
    target = "results/micro/eval/micro-opt-b/synth/n64/seed0/step6/synth-overlap.predictions.parquet"
    res = smk(tmp_path, path, target)
    assert res.returncode == 0, res.stderr[-3000:]
    assert len(pd.read_parquet(tmp_path / target)) == 60


def test_two_experiments_in_one_folder_leave_each_other_alone(micro_run, tmp_path):
    """micro, then a second config reusing the model name with other settings: each lives in its
    own results/<experiment>/, so the second moves none of the first's checkpoints aside and
    the first's tables, figures and predictions are untouched; rerunning the first does nothing."""
    wd = copy_run(micro_run, tmp_path, "two")  # the first experiment, finished
    first = {p: p.stat().st_mtime_ns for p in (wd / R).rglob("*") if p.is_file()}
    cfg = micro_config()
    cfg.pop("experiment")  # named after its file: results/micro-lr/
    cfg["finetune"].update(learning_rate=0.01, max_steps=8, checkpoints={"every": 2})  # 5 checkpoints: enough
    cfg["evaluation"]["unit"] = "run"  # 3 evaluation processes, not 15: the folders are what is tested here
    path = wd / "micro-lr.yaml"
    path.write_text(yaml.safe_dump(cfg))
    res = smk(wd, path)
    assert res.returncode == 0, res.stderr[-3000:]
    assert {p: p.stat().st_mtime_ns for p in (wd / R).rglob("*") if p.is_file()} == first
    assert sorted(pd.read_csv(wd / "results/micro-lr/scores.csv")["step"].unique()) == [0, 2, 4, 6, 8]
    assert not list((wd / R / "finetune").rglob("checkpoints.stale-*"))
    again = smk(wd, micro_run[2], "-n")
    assert again.returncode == 0 and "Nothing to be done" in again.stdout + again.stderr, again.stdout[-2000:]


def test_a_run_that_asks_for_one_file_says_what_it_made(micro_run):
    """A targeted run (`snakemake results/micro/data/x.jsonl`) ends saying what it made, not pointing
    at scores and partial correlations it did not make."""
    wd, _, cfg_path = micro_run
    res = smk(wd, cfg_path, f"{R}/data/synth-distractor.jsonl")
    assert res.returncode == 0, res.stderr[-3000:]
    assert f"oodcorr: made what was asked: {R}/data/synth-distractor.jsonl; no scores" in res.stdout, res.stdout[-2000:]
    assert "partial correlations in" not in res.stdout and "the answer," not in res.stdout


def test_lint_is_clean():
    res = subprocess.run(
        [SNAKEMAKE, "-s", str(REPO / "Snakefile"), "-d", str(REPO), "--lint"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-3000:]
    assert "Lints for" not in out, out[-3000:]


def test_bookkeeping_changes_rerun_nothing(micro_run):
    """Batch sizes, a rule's resources, a dataset's description and the order of a model's keys are
    bookkeeping: on the finished micro run, a config that changes only them plans nothing."""
    wd, cfg, cfg_path = micro_run
    import copy

    cfg2 = copy.deepcopy(cfg)
    cfg2["evaluation"]["batch_size"] = 7
    cfg2["models"][0]["resources"] = {"evaluate": {"mem_mb": 1234}}
    cfg2["datasets"]["synth-overlap"]["description"] = "edited"
    cfg2["models"][0] = dict(reversed(list(cfg2["models"][0].items())))  # key order
    path = wd / "micro_bookkeeping.yaml"
    path.write_text(yaml.safe_dump(cfg2, sort_keys=False))
    dry = smk(wd, path, "-n")
    assert dry.returncode == 0, dry.stderr[-3000:]
    assert "Nothing to be done" in dry.stdout + dry.stderr, dry.stdout[-3000:]


def test_another_commit_or_a_dirty_tree_reruns_nothing(micro_run, tmp_path):
    """Provenance is recorded beside the results, never in a rule's params or the config's digest: with
    git saying another commit and edited files (a git on PATH that says so to every process of the run),
    a dry run plans nothing."""
    wd, cfg_path = copy_run(micro_run, tmp_path, "commit"), micro_run[2]
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "git").write_text(
        "#!/bin/sh\n"
        'case "$*" in\n'
        "  *rev-parse*) echo 0123456789abcdef0123456789abcdef01234567 ;;\n"
        "  *status*) echo ' M Snakefile' ;;\n"
        "esac\n"
    )
    (fake / "git").chmod(0o755)
    env = {"PATH": f"{fake}{os.pathsep}{os.environ['PATH']}"}
    # the fake is what the run's processes see: the code they would record is another commit, dirty
    code = "import json; from oodcorr.core.provenance import code_provenance; print(json.dumps(code_provenance()))"
    seen = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        check=True,
    )
    assert json.loads(seen.stdout)["git_commit"] == "0123456789abcdef0123456789abcdef01234567"
    assert json.loads(seen.stdout)["git_dirty"] is True
    dry = smk(wd, cfg_path, "-n", env=env)
    assert dry.returncode == 0, dry.stderr[-3000:]
    assert "Nothing to be done" in dry.stdout + dry.stderr, dry.stdout[-3000:]


def test_unit_run_summary_listing_a_deleted_predictions_file_is_refused_at_planning(micro_run_unit, tmp_path):
    """Unit run: the job declares only its summary, so Snakemake alone would not rerun it;
    planning names the summary and the command, and that command restores the file."""
    wd = copy_run(micro_run_unit, tmp_path, "deleted-unit")
    gone = wd / R / f"eval/{RUN}/step8/synth-overlap.predictions.parquet"
    gone.unlink()
    dry = smk(wd, micro_run_unit[2], "-n")
    assert dry.returncode != 0
    summary = f"{R}/eval/{RUN}/synth-overlap.json"
    assert f"rm {summary}" in dry.stdout + dry.stderr
    (wd / summary).unlink()
    res = smk(wd, micro_run_unit[2])
    assert res.returncode == 0, res.stderr[-3000:]
    assert gone.exists()
