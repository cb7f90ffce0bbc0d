"""One run's finetuning as an object (oodcorr.planning.finetune_job): its JSON round trip, its typed view of
the finetune block, and that neither changes the run identity a finetune writes."""

import json
from dataclasses import fields, replace
from pathlib import Path

import pytest
import yaml

import oodcorr.jobs.finetune as f
from oodcorr.core.digests import sha256_json
from oodcorr.core.errors import ConfigError
from oodcorr.planning.config import Experiment
from oodcorr.planning.finetune_job import FinetuneJob, TrainingSettings, trains_in_bf16
from oodcorr.planning.plan import load
from oodcorr.planning.schema import fill_defaults

from helpers import LABELS, PROMPT, REPO

# keys of the finetune block that planning turns into steps, max_steps, n_train and seed: not the Trainer's
PLANNING_KEYS = ("n_train", "seeds", "max_steps", "epochs", "checkpoints", "report_to")


def _job(tmp_path, **over) -> FinetuneJob:
    kw = dict(
        model_spec={"name": "tiny", "tiny": {"model_type": "opt"}},
        built_model_dir=str(tmp_path / "tiny"),
        train_path=str(tmp_path / "train.jsonl"),
        labels=list(LABELS),
        prompt=PROMPT,
        finetune={
            "batch_size": 8,
            "learning_rate": 3e-3,
            "max_length": 64,
            "max_steps": 20,
            "checkpoints": {"every": 5},
            "lora": {"r": 4, "alpha": 8},
        },
        n_train=64,
        seed=3,
        steps=[0, 5, 10, 15, 20],
        max_steps=20,
        run_dir=str(tmp_path / "run"),
        manifest_path=str(tmp_path / "run" / "manifest.json"),
    )
    return FinetuneJob(**(kw | over))


def test_json_round_trip_gives_the_same_job_in_one_form(tmp_path):
    job = _job(tmp_path, report_to=["tensorboard", "wandb"], device="cuda", threads=4)
    back = FinetuneJob.from_json(job.to_json())
    assert back == job
    # lists, str subclasses and strings come back as the job's own types
    assert back.labels == tuple(LABELS) and back.steps == (0, 5, 10, 15, 20)
    assert back.report_to == ("tensorboard", "wandb")
    assert isinstance(back.run_dir, Path) and back.manifest_path == tmp_path / "run" / "manifest.json"
    assert back.training == job.training
    # the JSON has one key per field a caller sets (not the derived `training`)
    assert set(json.loads(job.to_json())) == {f.name for f in fields(FinetuneJob) if f.init}
    # to_dict shares nothing with the job
    d = job.to_dict()
    d["finetune"]["learning_rate"] = 1.0
    d["model_spec"]["name"] = "other"
    assert job.finetune["learning_rate"] == 3e-3 and job.name == "tiny"


def test_a_job_from_json_names_an_unknown_or_missing_field(tmp_path):
    d = _job(tmp_path).to_dict()
    with pytest.raises(ValueError, match=r"unknown field\(s\) ft\b"):
        FinetuneJob.from_mapping(d | {"ft": {}})
    del d["manifest_path"], d["seed"]
    with pytest.raises(ValueError, match=r"missing field\(s\) seed, manifest_path"):
        FinetuneJob.from_mapping(d)
    # the fields with defaults (how it runs) may be left out
    d = _job(tmp_path).to_dict()
    for k in ("report_to", "device", "threads"):
        del d[k]
    job = FinetuneJob.from_mapping(d)
    assert (job.report_to, job.device, job.threads) == ("auto", "cpu", 1)


def test_on_changes_only_where_the_job_runs(tmp_path):
    job = _job(tmp_path)
    there = job.on(device="cuda", threads=8)
    assert (there.device, there.threads) == ("cuda", 8)
    assert replace(there, device=job.device, threads=job.threads) == job


def test_training_settings_read_the_block_with_its_defaults():
    t = TrainingSettings.from_mapping({"batch_size": 4, "learning_rate": 1, "max_length": 32, "epochs": 3})
    assert (t.batch_size, t.learning_rate, t.max_length) == (4, 1.0, 32)
    assert isinstance(t.learning_rate, float)
    assert t.gradient_accumulation_steps == 1 and t.weight_decay == 0.0 and t.max_grad_norm == 1.0
    assert t.lr_scheduler == "linear" and t.loss == "verbalisers" and t.lora is None and t.bf16 is False
    assert t.warmup_steps(20) == 0
    # warm-up rounds up to whole steps: 0.1 of 15 steps is 1.5, so 2
    assert (
        TrainingSettings.from_mapping(
            {"batch_size": 4, "learning_rate": 1, "max_length": 32, "warmup_ratio": 0.1}
        ).warmup_steps(15)
        == 2
    )


def test_a_bad_finetune_block_is_refused_when_planning_naming_the_key():
    """The typed view reads a block the schema has checked: a misspelt or missing key stops planning."""
    cfg = yaml.safe_load((REPO / "config/config.yaml").read_text())
    cfg["finetune"]["lerning_rate"] = 1e-3
    with pytest.raises(ConfigError, match=r"finetune\.lerning_rate: unknown key; did you mean 'learning_rate'"):
        load(cfg, REPO)
    cfg = yaml.safe_load((REPO / "config/config.yaml").read_text())
    del cfg["finetune"]["batch_size"]
    with pytest.raises(ConfigError, match=r"finetune\.batch_size: required key is missing"):
        load(cfg, REPO)


@pytest.mark.parametrize("name", sorted(p.name for p in (REPO / "config").glob("*.yaml") if p.name != "schema.yaml"))
def test_every_shipped_configs_planned_block_reads_as_it_is(name):
    """Each finetuned model's planned finetune block (Plan.finetune_params) reads into the typed
    view, and every value the block sets is the value training uses."""
    cfg = yaml.safe_load((REPO / "config" / name).read_text())
    fill_defaults(cfg, REPO / "config/schema.yaml")
    exp = Experiment(cfg, REPO)
    for m in exp.finetuned_models():
        block = exp.finetune_params(m)
        t = TrainingSettings.from_mapping(block)
        for k, v in block.items():
            if k not in PLANNING_KEYS:
                assert getattr(t, k) == v, (name, m, k)


def test_every_key_of_the_schemas_finetune_block_is_read_by_training_or_planning():
    schema = yaml.safe_load((REPO / "config/schema.yaml").read_text())
    keys = set(schema["$defs"]["finetune"]["properties"])
    read = {f.name for f in fields(TrainingSettings)} | set(PLANNING_KEYS)
    assert keys == read, f"schema only: {sorted(keys - read)}; typed view only: {sorted(read - keys)}"


def test_bf16_is_one_rule_for_the_trainer_and_the_launcher(tmp_path):
    for dtype, flag, want in [("bfloat16", False, True), ("float32", True, True), ("float32", False, False)]:
        job = _job(
            tmp_path, model_spec={"name": "m", "dtype": dtype}, finetune=dict(_job(tmp_path).finetune, bf16=flag)
        )
        assert job.bf16 is want and trains_in_bf16(job.model_entry, job.finetune) is want


def test_the_run_identity_is_the_planned_block_and_survives_the_json_trip(tmp_path, monkeypatch):
    """The identity hashes the finetune block as planned (not the typed view, so runs trained before
    the job object existed keep their identity), lists for labels and steps, and is the same for a
    job that went through JSON to a launched process."""
    (tmp_path / "train.jsonl").write_text('{"premise": "a", "hypothesis": "b", "label": "entailment"}\n')
    monkeypatch.setattr(f, "base_weights_fingerprint", lambda entry, tiny: f"weights of {entry.name} in {tiny}")
    job = _job(tmp_path, finetune=dict(_job(tmp_path).finetune, n_train=[64], seeds=[3]))
    ident = f.run_identity(job)
    assert ident["finetune"] == {k: v for k, v in job.finetune.items() if k not in ("n_train", "seeds")}
    assert "max_steps" in ident["finetune"] and "checkpoints" in ident["finetune"]  # as before: kept
    assert ident["model"] == {"name": "tiny", "tiny": {"model_type": "opt"}}  # the params as planned
    assert ident["labels"] == list(LABELS) and ident["steps"] == [0, 5, 10, 15, 20]
    assert (ident["n_train"], ident["seed"], ident["max_steps"], ident["prompt"]) == (64, 3, 20, PROMPT)
    assert ident["base_weights"] == f"weights of tiny in {tmp_path / 'tiny'}"
    assert len(ident["train_sha256"]) == 64
    back = FinetuneJob.from_json(job.to_json())
    assert sha256_json(f.run_identity(back)) == sha256_json(ident)
    # a setting training does not read still changes the identity (a changed block is a new run)
    other = replace(job, finetune=dict(job.finetune, checkpoints={"every": 10}))
    assert sha256_json(f.run_identity(other)) != sha256_json(ident)


def test_a_job_whose_model_entry_has_a_key_this_code_does_not_know_is_refused_naming_it(tmp_path):
    """Params planned by other code (an entry with ``resources``, as the plan once passed it): refused
    when the job is built, before any file is read, naming the key and what to do."""
    with pytest.raises(ConfigError, match=r"models\[tiny\]: unknown key\(s\) 'resources' .*plan again"):
        _job(tmp_path, model_spec={"name": "tiny", "tiny": {"model_type": "opt"}, "resources": {"finetune": {}}})
