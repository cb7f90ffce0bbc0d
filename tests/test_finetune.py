"""Finetuning: schedule, manifests, and resuming after a SIGKILL."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from conftest import LABELS, PROMPT
from oodcorr import synthetic
from oodcorr.finetune import MANIFEST, find_resume_point, finetune, verify_checkpoint
from oodcorr.io import write_jsonl_atomic

STEPS = [0, 5, 10, 15, 20]


def _kwargs(tmp_path, tiny_dir, name, lora=None):
    train = tmp_path / "train.jsonl"
    if not train.exists():
        write_jsonl_atomic(train, synthetic.generate("in-domain", 200, 0, split="train"))
    ft = {"batch_size": 8, "learning_rate": 3e-3, "max_length": 64, "warmup_ratio": 0.1}
    if lora:
        ft["lora"] = lora
    run = tmp_path / name
    return dict(model_spec={"name": "tiny", "tiny": {"model_type": "opt"}}, tiny_dir=str(tiny_dir),
                train_path=str(train), labels=LABELS, prompt=PROMPT, ft=ft, n_train=64, seed=0,
                steps=STEPS, max_steps=20, run_dir=str(run), manifest_path=str(run / "manifest.json"), threads=1)


def _weights(run_dir, step):
    d = Path(run_dir) / "checkpoints" / f"checkpoint-{step}"
    files = sorted(d.glob("*.safetensors"))
    assert files, d
    return load_file(files[0])


def test_schedule_manifest_and_learning(tmp_path, tiny_models):
    kw = _kwargs(tmp_path, tiny_models["opt"], "a")
    info = finetune(**kw)
    assert [c["step"] for c in info["checkpoints"]] == STEPS
    for step in STEPS:
        d = Path(kw["run_dir"]) / "checkpoints" / f"checkpoint-{step}"
        assert verify_checkpoint(d)[0]
        assert (d / "model.safetensors").exists()
        assert not list(d.glob("*.bin")) and not (d / "optimizer.pt").exists()  # pruned after the run
    w0, w20 = _weights(kw["run_dir"], 0), _weights(kw["run_dir"], 20)
    assert any(not torch.equal(w0[k], w20[k]) for k in w0)  # training changed the weights
    assert info["resumed_from"] is None
    assert json.loads(Path(kw["manifest_path"]).read_text())["max_steps"] == 20


def test_lora_saves_adapters_only(tmp_path, tiny_models):
    kw = _kwargs(tmp_path, tiny_models["opt"], "lora",
                 lora={"r": 4, "alpha": 8, "dropout": 0.0, "target_modules": ["q_proj", "v_proj"]})
    finetune(**kw)
    d = Path(kw["run_dir"]) / "checkpoints" / "checkpoint-20"
    assert (d / "adapter_model.safetensors").exists() and (d / "adapter_config.json").exists()
    assert not (d / "model.safetensors").exists()
    w = load_file(d / "adapter_model.safetensors")
    assert w and all("lora_" in k for k in w)


SLOW_RUNNER = """
import json, sys, time
import oodcorr.finetune as f
orig = f._make_trainer_classes
def patched():
    T, S = orig()
    class Slow(S):
        def on_step_end(self, args, state, control, **kw):
            if state.global_step > 10:
                time.sleep(0.5)   # give the test time to kill us between checkpoints 10 and 15
            return super().on_step_end(args, state, control, **kw)
    return T, Slow
f._make_trainer_classes = patched
f.finetune(**json.loads(sys.argv[1]))
"""


def test_killed_finetune_resumes_and_matches_uninterrupted(tmp_path, tiny_models):
    ref = _kwargs(tmp_path, tiny_models["opt"], "ref")
    finetune(**ref)
    kw = _kwargs(tmp_path, tiny_models["opt"], "killed")
    proc = subprocess.Popen([sys.executable, "-c", SLOW_RUNNER, json.dumps(kw)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    marker = Path(kw["run_dir"]) / "checkpoints" / "checkpoint-10" / MANIFEST
    deadline = time.time() + 120
    while not marker.exists():
        assert proc.poll() is None, "finetune exited before checkpoint 10"
        assert time.time() < deadline, "checkpoint 10 never appeared"
        time.sleep(0.05)
    time.sleep(0.8)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not Path(kw["manifest_path"]).exists()
    assert not (Path(kw["run_dir"]) / "checkpoints" / "checkpoint-20").exists()

    info = finetune(**kw)
    assert info["resumed_from"].endswith("checkpoint-10")
    a, b = _weights(ref["run_dir"], 20), _weights(kw["run_dir"], 20)
    for k in a:  # CPU training is deterministic; resumed == uninterrupted to 1e-6
        torch.testing.assert_close(a[k], b[k], atol=1e-6, rtol=0)


def test_truncated_checkpoint_is_detected_and_skipped(tmp_path, tiny_models):
    kw = _kwargs(tmp_path, tiny_models["opt"], "trunc")
    ckroot = Path(kw["run_dir"]) / "checkpoints"
    # fake a run that stopped after checkpoint 10, whose newest save is damaged
    finetune(**kw)
    for step in (5, 10):
        d = ckroot / f"checkpoint-{step}"
        man = json.loads((d / MANIFEST).read_text())
        man["resumable"] = True
        (d / MANIFEST).write_text(json.dumps(man))
    for step in (15, 20):
        import shutil
        shutil.rmtree(ckroot / f"checkpoint-{step}")
    w = ckroot / "checkpoint-10" / "model.safetensors"
    w.write_bytes(w.read_bytes()[: w.stat().st_size // 2])
    ok, why = verify_checkpoint(ckroot / "checkpoint-10")
    assert not ok and "truncated" in why
    assert find_resume_point(ckroot) == ckroot / "checkpoint-5"
    assert not (ckroot / "checkpoint-10").exists()
    assert list(ckroot.glob(".incomplete-checkpoint-10-*"))  # moved aside, not deleted


def test_changed_settings_never_resume_from_old_checkpoints(tmp_path, tiny_models):
    kw = _kwargs(tmp_path, tiny_models["opt"], "changed")
    finetune(**kw)
    run = Path(kw["run_dir"])
    # pretend the first attempt died after checkpoint 10, with its optimizer state kept
    man = json.loads((run / "checkpoints/checkpoint-10" / MANIFEST).read_text())
    man["resumable"] = True
    (run / "checkpoints/checkpoint-10" / MANIFEST).write_text(json.dumps(man))
    kw2 = dict(kw, ft=dict(kw["ft"], learning_rate=1e-4))
    info = finetune(**kw2)
    assert info["resumed_from"] is None
    stale = list(run.glob("checkpoints.stale-*"))
    assert len(stale) == 1 and (stale[0] / "checkpoint-20" / "model.safetensors").exists()  # kept, not deleted
