"""The workflow's last lines and the report's landing text give the answer: agreement.csv, the consensus
heatmap and the pairs per verdict (oodcorr.launch.disk_checks.end_of_run_report, launch.published_check)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import yaml

from oodcorr.launch.disk_checks import end_of_run_report
from oodcorr.planning.plan import load

from helpers import REPO


def _agreement(path: Path, verdicts, n_models, method, residualiser, **measured):
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(
        {
            "in_domain": "synth-test",
            "pool_group": "all runs",
            "x": [f"a{i}" for i in range(len(verdicts))],
            "y": "b",
            "method": method,
            "residualiser": residualiser,
            "verdict": verdicts,
            "n_models_consensus": n_models,
            "n_models": n_models,
            **measured,
        }
    ).to_csv(path, index=False)


def test_the_last_line_of_a_run_is_the_answer(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = yaml.safe_load((REPO / "config/config.yaml").read_text())
    plan = load(cfg, REPO, [REPO / "config/config.yaml"])
    assert end_of_run_report(plan, failed=False)[-1].startswith("oodcorr: scores in")  # nothing published yet
    a = plan.paths.analysis
    method, res = plan.analysis["methods"][0], plan.analysis["residualisers"][0]
    # the default's shape: its OOD testsets' pairs (5 with the planted pair: 10), its models (2)
    ood = [t for t, role in plan.testsets["synth"] if role == "ood"]
    n_pairs, n_models = len(ood) * (len(ood) - 1) // 2, len(plan.models)
    assert (n_pairs, n_models, res) == (10, 2, "spline")
    _agreement(Path(a) / "agreement.csv", ["unresolved"] * n_pairs, n_models, method, res)
    lines = end_of_run_report(plan, failed=False)
    assert lines[-1] == (
        f"oodcorr: the answer, {a}/agreement.csv ({method}, {res}): in-domain synth-test: 10 pairs, a sign for 0: "
        "10 unresolved (2 models: no further model can be predicted, so nothing is said of nearly every model; that "
        f"needs 3 or more); consensus heatmap {a}/consensus/synth-test.png, forest plots (why each pair) in "
        f"{a}/forest/synth-test/"
    )
    # the report's landing text reads the same lines from analysis/answer.txt (rule explorer writes it;
    # tests/workflow/test_workflow.py::test_report_renders checks the report)


def test_the_last_line_says_what_the_answer_is_about_and_what_leaves_pairs_noise_limited(tmp_path, monkeypatch):
    """agreement.csv as the analysis writes it (empty cells where nothing is known) read back as text."""
    monkeypatch.chdir(tmp_path)
    plan = load(yaml.safe_load((REPO / "config/micro.yaml").read_text()), REPO, [REPO / "config/micro.yaml"])
    a = plan.paths.analysis
    method, res = plan.analysis["methods"][0], plan.analysis["residualisers"][0]
    _agreement(
        Path(a) / "agreement.csv",
        ["noise-limited", "unresolved"],
        3,
        method,
        res,
        about="tasks",
        noise_limited=["a0 (reliability 0.12)", None],
        reliability_x=[0.12, 0.8],
        reliability_x_low=[0.05, 0.7],
        reliability_y=[float("nan"), 0.6],
    )
    line = end_of_run_report(plan, failed=False)[-1]
    assert (
        "1 noise-limited; 1 unresolved (3 models); about the tasks; noise-limited by a0 (reliability 0.12, 1 pair)"
        in line
    )


def test_an_unreadable_answer_table_is_a_line_not_a_crash(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    plan = load(yaml.safe_load((REPO / "config/micro.yaml").read_text()), REPO, [REPO / "config/micro.yaml"])
    bad = Path(plan.paths.analysis) / "agreement.csv"
    bad.parent.mkdir(parents=True)
    bad.write_bytes(b"\xff\xfe\x00garbage")
    assert "the answer's table cannot be read" in end_of_run_report(plan, failed=False)[-1]
