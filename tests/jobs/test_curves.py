"""The figures (oodcorr.jobs.figures.curves, through the report_tables rule script): a damaged input stops
them with a sentence."""

from __future__ import annotations

import types

from helpers import run_rule_script, truncated_json


def test_a_truncated_manifest_stops_the_training_loss_figure_with_a_sentence(tmp_path):
    man = truncated_json(tmp_path / "finetune/m/d/n4/seed0/manifest.json", {"loss_history": [{"step": 1, "loss": 1.0}]})
    msg = run_rule_script(
        "report_tables",
        tmp_path,
        rule="training_loss",
        input=[str(man)],
        output=[str(tmp_path / "loss.png")],
        wildcards=types.SimpleNamespace(model="m"),
    )
    assert msg is not None and msg.startswith(f"oodcorr: {man}: a run's manifest is unreadable (truncated"), msg
