"""The experiment's record (oodcorr.launch.experiment): what made the experiment, beside its config.
(Two writers, copied folders: tests/launch/test_experiment_faults.py.)"""

from __future__ import annotations

import json
import subprocess

from oodcorr.core import locks
from oodcorr.core.atomic_write import write_json_atomic
from oodcorr.core.digests import sha256_json
from oodcorr.launch import experiment
from oodcorr.launch.experiment import IDENTITY, lock_and_record, record_provenance

from helpers import MICRO, REPO, micro_config, micro_plan


def _release(root) -> None:
    held = locks._HELD.get(str((root / locks.EXPERIMENT.file).resolve()))
    if held is not None:
        locks.release(held)


def test_the_record_names_the_code_of_the_run_and_the_libraries_of_the_published_scores(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.argv", ["snakemake", "--cores", "2"])
    config = micro_config()
    plan = micro_plan(config)
    root = tmp_path / plan.paths.root
    try:
        assert lock_and_record(plan, [MICRO], config) is None
        doc = json.loads((root / IDENTITY).read_text())
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True)
        run = doc["provenance"]["run"]
        assert run["git_commit"] == head.stdout.strip() and set(run) >= {"git_dirty", "oodcorr", "python", "snakemake"}
        assert set(doc["provenance"]) == {"run"}  # nothing published yet
        # provenance is not the config's: its digest is the config's alone
        assert doc["config_sha256"] == sha256_json(config)
        # the run publishes its scores with their provenance.json; at its end the record names their libraries
        libs = {"torch": {"2.13.0": 15}, "transformers": {"5.24.0": 15}, "peft": {"0.21.2": 15}}
        write_json_atomic(tmp_path / plan.paths.provenance, {"evaluate": libs, "finetune": {}, "aggregated_by": {}})
        assert record_provenance(plan) is None
        after = json.loads((root / IDENTITY).read_text())
        assert after["provenance"] == {"run": run, "evaluate": libs, "finetune": {}}
        assert {k: v for k, v in after.items() if k != "provenance"} == {
            k: v for k, v in doc.items() if k != "provenance"
        }
    finally:
        _release(root)


def test_a_record_that_cannot_be_written_at_the_end_is_a_warning(tmp_path, monkeypatch):
    """The results are published by then: the run does not fail for its record, it says so."""
    monkeypatch.chdir(tmp_path)
    plan = micro_plan(micro_config())
    root = tmp_path / plan.paths.root
    record = {"configs": ["micro.yaml"], "config": {}, "records_id": "r1"}  # a whole record, as claim writes one
    write_json_atomic(root / experiment.IDENTITY, record)

    def refuse(path, doc):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(experiment, "write_json_atomic", refuse)
    warning = experiment.record_provenance(plan)
    assert warning and "experiment.json was not brought up to date" in warning and "provenance.json" in warning
    assert json.loads((root / experiment.IDENTITY).read_text()) == record
