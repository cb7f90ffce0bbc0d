"""The workflow end to end through Snakemake, on the micro config, in a temporary folder."""
import json
import re
import subprocess

import pandas as pd
import pytest
import yaml

from conftest import REPO, SNAKEMAKE, smk

pytestmark = pytest.mark.slow


def job_counts(dry_run_stdout: str) -> dict:
    block = dry_run_stdout.split("Job stats:", 1)[1].split("\n\n", 1)[0]
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\w+)\s+(\d+)\s*$", block, re.M)
            if m.group(1) != "total"}


@pytest.fixture(scope="module")
def micro_run(tmp_path_factory):
    wd = tmp_path_factory.mktemp("micro")
    cfg = yaml.safe_load((REPO / "config/micro.yaml").read_text())
    cfg_path = wd / "micro.yaml"
    cfg_path.write_text(yaml.safe_dump(cfg))
    res = smk(wd, cfg_path)
    assert res.returncode == 0, res.stderr[-5000:]
    return wd, cfg, cfg_path


def test_end_to_end_outputs(micro_run):
    wd, cfg, _ = micro_run
    scores = pd.read_csv(wd / "results/scores.csv")
    steps = [0, 4, 8, 12, 16]
    assert sorted(scores["step"].unique()) == steps
    assert len(scores) == len(steps) * 3  # one run x steps x (in-domain + 2 OOD)
    assert set(scores["role"]) == {"in-domain", "ood"}
    assert scores.loc[scores.role == "in-domain", "testset"].unique().tolist() == ["synth-test"]
    assert scores["accuracy"].between(0, 1).all() and (scores["n"] == 60).all()
    assert (scores["accuracy"] == scores["n_correct"] / scores["n"]).all()
    pd.testing.assert_frame_equal(pd.read_parquet(wd / "results/scores.parquet"), scores, check_dtype=False)

    # one evaluation job per run x testset: its summary lists every checkpoint, and each
    # checkpoint x testset has its own predictions file, whose metadata repeats its record
    from oodcorr.evaluate import read_result

    summary = json.loads((wd / "results/eval/micro-opt/synth/n64/seed0/synth-overlap.json").read_text())
    assert summary["steps"] == steps and [r["step"] for r in summary["checkpoints"]] == steps
    assert summary["run_id"] == "micro-opt/synth/n64/seed0" and summary["testset"] == "synth-overlap"
    one = summary["checkpoints"][2]
    path = wd / "results/eval/micro-opt/synth/n64/seed0/step8/synth-overlap.predictions.parquet"
    assert one["predictions"] == str(path.relative_to(wd))
    pred = pd.read_parquet(path)
    assert len(pred) == one["n"] == 60 and pred["correct"].mean() == pytest.approx(one["accuracy"])
    assert one["fingerprint"].startswith("synthetic:") and one["run_id"] == "micro-opt/synth/n64/seed0"
    stored = read_result(path)
    assert {k: stored[k] for k in ("step", "accuracy", "n_correct", "testset")} == \
        {k: one[k] for k in ("step", "accuracy", "n_correct", "testset")}
    row = scores[(scores.testset == "synth-overlap") & (scores.step == 8)]
    assert row["accuracy"].item() == one["accuracy"] and row["predictions"].item() == one["predictions"]
    # the fixed costs are paid once per job: imports and the cache are timed once, in the summary
    assert set(summary["timing_s"]) == {"startup", "imports", "cache", "checkpoints"}
    assert all(set(r["timing_s"]) == {"model", "forward", "write"} for r in summary["checkpoints"])

    pairs = pd.read_csv(wd / "results/analysis/partial_correlations.csv")
    assert (pairs.run == "pooled").sum() == 1  # one pooled row per model and pair
    pairs = pairs[pairs.run != "pooled"].reset_index(drop=True)
    assert len(pairs) == 1 and {pairs.x[0], pairs.y[0]} == {"synth-overlap", "synth-negation"}
    assert pairs.n[0] == len(steps)
    assert pairs.ex_note.isna().all() and pairs.ex_ci_low.notna().all()  # example-level bootstrap ran
    png = (wd / "results/analysis/heatmaps/micro-opt.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000
    for f in ("agreement.csv", "heatmap_grid.png", "learning_curves/micro-opt.png", "scatter/micro-opt.png"):
        assert (wd / "results/analysis" / f).stat().st_size > 0, f
    for log in ("logs/finetune/micro-opt/synth/n64/seed0.log", "logs/models/micro-opt.log"):
        assert (wd / log).stat().st_size > 0


def test_report_renders(micro_run):
    wd, _, cfg_path = micro_run
    res = smk(wd, cfg_path, "--report", str(wd / "report.html"))
    assert res.returncode == 0, res.stderr[-3000:]
    html = (wd / "report.html").read_text(encoding="utf-8", errors="replace")
    for text in ("made measurable", "Learning curves", "Residualiser fits", "Heatmaps"):
        assert text in html, text


def test_adding_a_testset_schedules_only_its_evaluations(micro_run):
    wd, cfg, _ = micro_run
    before = {p: p.stat().st_mtime_ns for p in (wd / "results/eval").rglob("*") if p.is_file()}
    cfg2 = dict(cfg, ood_testsets=cfg["ood_testsets"] + ["synth-passive"])
    cfg2_path = wd / "micro_plus.yaml"
    cfg2_path.write_text(yaml.safe_dump(cfg2))

    dry = smk(wd, cfg2_path, "-n")
    assert dry.returncode == 0, dry.stderr[-3000:]
    counts = job_counts(dry.stdout)
    assert "finetune" not in counts and "build_tiny_model" not in counts
    assert counts["evaluate"] == 1  # one job (all 5 checkpoints), for the new testset only
    assert counts["tokenize_testset"] == 1 and counts["prepare_dataset"] == 1
    evals = re.findall(r"rule evaluate:\n(?:[^\n]*\n)*?\s+wildcards: ([^\n]*)", dry.stdout)
    assert len(evals) == 1 and all("testset=synth-passive" in w for w in evals)

    run = smk(wd, cfg2_path)
    assert run.returncode == 0, run.stderr[-3000:]
    after = {p: p.stat().st_mtime_ns for p in (wd / "results/eval").rglob("*") if p.is_file()}
    assert all(after[p] == t for p, t in before.items())  # nothing re-evaluated
    new = sorted(str(p.relative_to(wd / "results/eval")) for p in set(after) - set(before))
    assert new == sorted([f"micro-opt/synth/n64/seed0/step{k}/synth-passive.predictions.parquet"
                          for k in (0, 4, 8, 12, 16)] + ["micro-opt/synth/n64/seed0/synth-passive.json"])
    scores = pd.read_csv(wd / "results/scores.csv")
    assert len(scores) == 5 * 4
    pairs = pd.read_csv(wd / "results/analysis/partial_correlations.csv")
    assert len(pairs[pairs.run != "pooled"]) == 3


def test_runs_with_different_checkpoint_schedules_get_their_own_evaluate_rule(tmp_path):
    """A second model saving at other steps: its evaluation jobs come from rule evaluate_2,
    whose outputs are exactly its steps, and a real job of that rule writes them all."""
    cfg = yaml.safe_load((REPO / "config/micro.yaml").read_text())
    cfg["ood_testsets"] = cfg["ood_testsets"][:1]
    cfg["models"].append(dict(cfg["models"][0], name="micro-opt-b", finetune={"checkpoints": {"steps": [6, 16]}}))
    path = tmp_path / "two.yaml"
    path.write_text(yaml.safe_dump(cfg))
    dry = smk(tmp_path, path, "-n")
    assert dry.returncode == 0, dry.stderr[-3000:]
    counts = job_counts(dry.stdout)
    assert counts["evaluate"] == counts["evaluate_2"] == 2  # a job per run x testset
    jobs = re.findall(r"rule (evaluate(?:_2)?):\n(?:[^\n]*\n)*?\s+output: ([^\n]*)\n(?:[^\n]*\n)*?\s+wildcards: "
                      r"([^\n]*)", dry.stdout)
    assert len(jobs) == 4
    for rule, outputs, wildcards in jobs:
        steps = sorted(int(m) for m in re.findall(r"/step(\d+)/", outputs))
        model = re.search(r"model=([^,]+)", wildcards).group(1)
        assert (rule, steps) == (("evaluate", [0, 4, 8, 12, 16]) if model == "micro-opt" else ("evaluate_2", [0, 6, 16]))

    target = "results/eval/micro-opt-b/synth/n64/seed0/synth-overlap.json"
    res = smk(tmp_path, path, target)
    assert res.returncode == 0, res.stderr[-3000:]
    summary = json.loads((tmp_path / target).read_text())
    assert [r["step"] for r in summary["checkpoints"]] == [0, 6, 16]
    for r in summary["checkpoints"]:
        assert len(pd.read_parquet(tmp_path / r["predictions"])) == r["n"] == 60


def test_lint_is_clean():
    res = subprocess.run([SNAKEMAKE, "-s", str(REPO / "Snakefile"), "-d", str(REPO), "--lint"],
                         capture_output=True, text=True, timeout=300)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-3000:]
    assert "Lints for" not in out, out[-3000:]


def test_bookkeeping_changes_rerun_nothing(micro_run):
    wd, cfg, _ = micro_run
    import copy

    cfg2 = copy.deepcopy(cfg)
    cfg2["ood_testsets"] = cfg["ood_testsets"] + ["synth-passive"]
    base = wd / "micro_plus.yaml"
    base.write_text(yaml.safe_dump(cfg2))
    assert smk(wd, base).returncode == 0  # a no-op after the previous test
    cfg2["evaluation"]["batch_size"] = 7
    cfg2["models"][0]["resources"] = {"evaluate": {"mem_mb": 1234}}
    cfg2["datasets"]["synth-overlap"]["description"] = "edited"
    cfg2["models"][0] = dict(reversed(list(cfg2["models"][0].items())))  # key order
    path = wd / "micro_bookkeeping.yaml"
    path.write_text(yaml.safe_dump(cfg2, sort_keys=False))
    dry = smk(wd, path, "-n")
    assert dry.returncode == 0, dry.stderr[-3000:]
    assert "Nothing to be done" in dry.stdout + dry.stderr, dry.stdout[-3000:]


def test_finetune_killed_under_snakemake_resumes(tmp_path):
    """SIGKILL the finetune job's process: Snakemake fails the job and deletes its declared
    output (the manifest) but not the checkpoints, and the rerun resumes from them."""
    import os
    import signal
    import time

    cfg = yaml.safe_load((REPO / "config/micro.yaml").read_text())
    cfg["ood_testsets"] = cfg["ood_testsets"][:1]
    cfg["finetune"].update(max_steps=600, checkpoints={"every": 100})
    path = tmp_path / "slow.yaml"
    path.write_text(yaml.safe_dump(cfg))
    cmd = [SNAKEMAKE, "-s", str(REPO / "Snakefile"), "-d", str(tmp_path), "--configfile", str(path),
           "--cores", "1", "results/finetune/micro-opt/synth/n64/seed0/manifest.json"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    run = tmp_path / "results/finetune/micro-opt/synth/n64/seed0"
    marker = run / "checkpoints/checkpoint-200/oodcorr_manifest.json"
    deadline = time.time() + 600
    while not marker.exists():
        assert proc.poll() is None, "snakemake ended before checkpoint 200"
        assert time.time() < deadline
        time.sleep(0.1)
    # the job's own Python process (not Snakemake) dies, as under an OOM killer
    pids = subprocess.run(["pgrep", "-f", "finetune.py"], capture_output=True, text=True).stdout.split()
    victims = [int(p) for p in pids if os.getpgid(int(p)) == proc.pid]
    assert victims
    for pid in victims:
        os.kill(pid, signal.SIGKILL)
    assert proc.wait(timeout=120) != 0
    assert not (run / "manifest.json").exists()
    assert (run / "checkpoints/checkpoint-200/model.safetensors").exists()

    res = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    info = json.loads((run / "manifest.json").read_text())
    resumed = int(info["resumed_from"].rsplit("-", 1)[1])
    assert resumed >= 200 and [c["step"] for c in info["checkpoints"]] == list(range(0, 601, 100))
