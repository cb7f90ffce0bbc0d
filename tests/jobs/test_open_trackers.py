"""What was logged opens in TensorBoard's viewer with the folder the docs name (benchmarks/open_trackers.py:
TensorBoard started on 127.0.0.1 over an experiment folder laid out as the workflow lays it out, a page and
its runs fetched, the server stopped). The MLflow UI needs the full mlflow package, which does not install
beside the project's pins: the benchmark checks it from an environment of its own (benchmarks/README.md §18)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_tensorboard_serves_the_runs_and_the_answer_from_the_experiment_folder():
    got = subprocess.run(
        [sys.executable, str(REPO / "benchmarks/open_trackers.py"), "--skip-mlflow", "--timeout", "120"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    lines = [json.loads(line) for line in got.stdout.splitlines() if line.startswith("{")]
    assert got.returncode == 0, got.stdout + got.stderr
    (tb,) = lines
    assert tb["server"] == "tensorboard" and tb["ok"] and tb["status"] == 200
    # one --logdir, the experiment folder: a finetuning run's scores and the answer's lines both
    assert set(tb["runs"]) >= {"finetune/tiny-opt/synth/n200/seed0/tensorboard", "tensorboard"}
