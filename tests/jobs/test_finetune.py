"""Finetuning: schedule, manifests, and resuming after a SIGKILL."""

import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from oodcorr.jobs.checkpoints import MANIFEST, find_resume_point, verify_checkpoint
from oodcorr.jobs.finetune import finetune

from helpers import FINETUNE_STEPS, checkpoint_weights, finetune_job


def test_schedule_manifest_and_learning(tmp_path, tiny_models):
    job = finetune_job(tmp_path, tiny_models["opt"], "a")
    info = finetune(job)
    assert [c["step"] for c in info["checkpoints"]] == FINETUNE_STEPS
    for step in FINETUNE_STEPS:
        d = job.run_dir / "checkpoints" / f"checkpoint-{step}"
        assert verify_checkpoint(d)[0]
        assert (d / "model.safetensors").exists()
        assert not list(d.glob("*.bin")) and not (d / "optimizer.pt").exists()  # pruned after the run
    w0, w20 = checkpoint_weights(job.run_dir, 0), checkpoint_weights(job.run_dir, 20)
    assert any(not torch.equal(w0[k], w20[k]) for k in w0)  # training changed the weights
    assert info["resumed_from"] is None
    assert json.loads(job.manifest_path.read_text())["max_steps"] == 20


def test_lora_saves_adapters_only(tmp_path, tiny_models):
    job = finetune_job(
        tmp_path,
        tiny_models["opt"],
        "lora",
        lora={"r": 4, "alpha": 8, "dropout": 0.0, "target_modules": ["q_proj", "v_proj"]},
    )
    finetune(job)
    d = job.run_dir / "checkpoints" / "checkpoint-20"
    assert (d / "adapter_model.safetensors").exists() and (d / "adapter_config.json").exists()
    assert not (d / "model.safetensors").exists()
    w = load_file(d / "adapter_model.safetensors")
    assert w and all("lora_" in k for k in w)


SLOW_RUNNER = """
import json, sys, time
import oodcorr.jobs.finetune as f
from oodcorr.planning.finetune_job import FinetuneJob
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
f.finetune(FinetuneJob.from_json(sys.argv[1]))
"""


@pytest.mark.slow
def test_killed_finetune_resumes_and_matches_uninterrupted(tmp_path, tiny_models):
    ref = finetune_job(tmp_path, tiny_models["opt"], "ref")
    finetune(ref)
    job = finetune_job(tmp_path, tiny_models["opt"], "killed")
    proc = subprocess.Popen(
        [sys.executable, "-c", SLOW_RUNNER, job.to_json()], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    marker = job.run_dir / "checkpoints" / "checkpoint-10" / MANIFEST
    deadline = time.time() + 120
    while not marker.exists():
        assert proc.poll() is None, "finetune exited before checkpoint 10"
        assert time.time() < deadline, "checkpoint 10 never appeared"
        time.sleep(0.05)
    time.sleep(0.8)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not job.manifest_path.exists()
    assert not (job.run_dir / "checkpoints" / "checkpoint-20").exists()

    info = finetune(job)
    assert info["resumed_from"].endswith("checkpoint-10")
    a, b = checkpoint_weights(ref.run_dir, 20), checkpoint_weights(job.run_dir, 20)
    for k in a:  # CPU training is deterministic; resumed == uninterrupted to 1e-6
        torch.testing.assert_close(a[k], b[k], atol=1e-6, rtol=0)


class _Stop(Exception):
    pass


def _interrupted(monkeypatch, job, after_step):
    """Run finetune in-process and make it die right after ``after_step`` (a crash, not a clean stop)."""
    import oodcorr.jobs.finetune as f

    orig = f._make_trainer_classes

    def patched():
        T, S = orig()

        class Dying(S):
            def on_step_end(self, args, state, control, **k):
                out = super().on_step_end(args, state, control, **k)
                if state.global_step > after_step:
                    raise _Stop()
                return out

        return T, Dying

    monkeypatch.setattr(f, "_make_trainer_classes", patched)
    with pytest.raises(_Stop):
        finetune(job)
    monkeypatch.setattr(f, "_make_trainer_classes", orig)


def test_truncated_checkpoint_is_detected_and_skipped(tmp_path, tiny_models, monkeypatch):
    job = finetune_job(tmp_path, tiny_models["opt"], "trunc")
    ckroot = job.run_dir / "checkpoints"
    _interrupted(monkeypatch, job, after_step=12)
    assert find_resume_point(ckroot, FINETUNE_STEPS) == ckroot / "checkpoint-10"
    w = ckroot / "checkpoint-10" / "model.safetensors"
    w.write_bytes(w.read_bytes()[: w.stat().st_size // 2])
    ok, why = verify_checkpoint(ckroot / "checkpoint-10")
    assert not ok and "truncated" in why
    # checkpoint 5 kept its weights but not its optimizer state: start again from scratch
    assert find_resume_point(ckroot, FINETUNE_STEPS) is None
    assert not (ckroot / "checkpoint-10").exists()
    assert list(ckroot.glob(".incomplete-checkpoint-10-*"))  # moved aside, not deleted
    info = finetune(job)
    assert info["resumed_from"] is None and all(
        verify_checkpoint(ckroot / f"checkpoint-{s}")[0] for s in FINETUNE_STEPS
    )


def test_damaged_optimizer_state_keeps_weights_but_not_resume(tmp_path, tiny_models, monkeypatch):
    job = finetune_job(tmp_path, tiny_models["opt"], "optim")
    ckroot = job.run_dir / "checkpoints"
    _interrupted(monkeypatch, job, after_step=12)
    opt = ckroot / "checkpoint-10" / "optimizer.pt"
    opt.write_bytes(opt.read_bytes()[:10])
    assert verify_checkpoint(ckroot / "checkpoint-10")[0]  # still fine for evaluation
    assert find_resume_point(ckroot, FINETUNE_STEPS) is None
    assert (ckroot / "checkpoint-10").exists()


@pytest.mark.slow
def test_kill_during_pruning_leaves_valid_checkpoints(tmp_path, tiny_models, monkeypatch):
    from oodcorr.jobs import checkpoints

    job = finetune_job(tmp_path, tiny_models["opt"], "prune")
    ckroot = job.run_dir / "checkpoints"
    _interrupted(monkeypatch, job, after_step=12)
    # the manifest is rewritten before any file goes: simulate a kill right after it
    real_unlink = Path.unlink
    monkeypatch.setattr(Path, "unlink", lambda self, missing_ok=False: (_ for _ in ()).throw(_Stop()))
    with pytest.raises(_Stop):
        checkpoints.prune_resume_state(ckroot, keep=None)
    monkeypatch.setattr(Path, "unlink", real_unlink)
    assert verify_checkpoint(ckroot / "checkpoint-10")[0]
    info = finetune(job)  # reruns cleanly (from scratch: no resumable state is left)
    assert [c["step"] for c in info["checkpoints"]] == FINETUNE_STEPS


def test_completed_run_is_not_trained_again(tmp_path, tiny_models):
    """... and its manifest names, for each checkpoint, the libraries of the job that trained it (each
    checkpoint's own manifest keeps them), not those of the job that found them done."""
    from oodcorr.core.provenance import library_versions

    job = finetune_job(tmp_path, tiny_models["opt"], "again")
    first = finetune(job)
    assert [c["libraries"] for c in first["checkpoints"]] == [library_versions()] * len(FINETUNE_STEPS)
    before = checkpoint_weights(job.run_dir, 20)
    job.manifest_path.unlink()
    ck20 = job.run_dir / "checkpoints/checkpoint-20" / MANIFEST
    older = {"torch": "2.12.0", "transformers": "5.23.0", "peft": "0.21.0"}  # as if an older install trained it
    ck20.write_text(json.dumps(dict(json.loads(ck20.read_text()), libraries=older)))
    info = finetune(job)
    assert info["trained"] is False
    after = checkpoint_weights(job.run_dir, 20)
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert [c["libraries"] for c in info["checkpoints"]] == [library_versions()] * (len(FINETUNE_STEPS) - 1) + [older]


def test_a_checkpoint_folder_replaced_by_another_steps_is_not_that_step(tmp_path, tiny_models):
    """`cp -r checkpoint-10 checkpoint-5` (manifest and all, so every hash matches): the checkpoint's
    own manifest names step 10, so step 5 is not complete; the rerun sets it aside and trains again,
    to the weights step 5 had. The run's manifest records each checkpoint's weights digest, which
    evaluation checks. (Before: its hashes matched, so the run was complete, and step 5 was
    evaluated with step 10's weights.)"""
    import shutil

    from oodcorr.jobs.checkpoints import weights_digest

    job = finetune_job(tmp_path, tiny_models["opt"], "replaced")
    info = finetune(job)
    ckroot = job.run_dir / "checkpoints"
    assert [c["weights"] for c in info["checkpoints"]] == [
        weights_digest(ckroot / f"checkpoint-{s}") for s in FINETUNE_STEPS
    ]
    assert len({c["weights"] for c in info["checkpoints"]}) == len(FINETUNE_STEPS)
    original = checkpoint_weights(job.run_dir, 5)
    shutil.rmtree(ckroot / "checkpoint-5")
    shutil.copytree(ckroot / "checkpoint-10", ckroot / "checkpoint-5")
    ok, why = verify_checkpoint(ckroot / "checkpoint-5")
    assert not ok and "is that of step 10, not 5" in why and "copied over it?" in why
    job.manifest_path.unlink()  # as the refusal in evaluation says
    again = finetune(job)
    assert again["trained"] is True and list(ckroot.glob(".incomplete-checkpoint-5-*"))
    for k, w in checkpoint_weights(job.run_dir, 5).items():
        torch.testing.assert_close(w, original[k], atol=1e-6, rtol=0)


def test_gradient_accumulation_matches_a_larger_batch(tmp_path, tiny_models):
    a = finetune_job(tmp_path, tiny_models["opt"], "bs8")
    a = replace(a, steps=[0, 1], max_steps=1, finetune=dict(a.finetune, batch_size=8, warmup_ratio=0.0))
    b = finetune_job(tmp_path, tiny_models["opt"], "bs4x2")
    b = replace(
        b,
        steps=[0, 1],
        max_steps=1,
        finetune=dict(b.finetune, batch_size=4, gradient_accumulation_steps=2, warmup_ratio=0.0),
    )
    ia, ib = finetune(a), finetune(b)
    # the logged loss is a per-example mean either way (near ln 2 at the start); before the fix the
    # accumulated loss was not divided by the accumulation steps and came out near 2 ln 2
    la, lb = ia["loss_history"][0]["loss"], ib["loss_history"][0]["loss"]
    assert 0.5 < la < 0.9 and abs(la - lb) < 0.15, (la, lb)


def test_changed_settings_never_resume_from_old_checkpoints(tmp_path, tiny_models):
    job = finetune_job(tmp_path, tiny_models["opt"], "changed")
    finetune(job)
    run = job.run_dir
    # pretend the first attempt died after checkpoint 10, with its optimizer state kept
    man = json.loads((run / "checkpoints/checkpoint-10" / MANIFEST).read_text())
    man["resumable"] = True
    (run / "checkpoints/checkpoint-10" / MANIFEST).write_text(json.dumps(man))
    job2 = replace(job, finetune=dict(job.finetune, learning_rate=1e-4))
    info = finetune(job2)
    assert info["resumed_from"] is None
    stale = list(run.glob("checkpoints.stale-*"))
    assert len(stale) == 1 and (stale[0] / "checkpoint-20" / "model.safetensors").exists()  # kept, not deleted


# ---- one writer per run folder ------------------------------------------------------------


@pytest.mark.slow
def test_a_second_finetune_is_refused_while_the_first_lives_and_runs_once_it_is_killed(tmp_path, tiny_models):
    """Two processes on one run folder: the second stops at once naming the first; after a SIGKILL
    of the first (the kernel drops its lock) the second resumes from its last checkpoint."""
    import socket

    from oodcorr.core.locks import LOCK_FILE, FolderInUse

    job = finetune_job(tmp_path, tiny_models["opt"], "two")
    first = subprocess.Popen(
        [sys.executable, "-c", SLOW_RUNNER, job.to_json()], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    run = job.run_dir
    marker = run / "checkpoints" / "checkpoint-10" / MANIFEST
    deadline = time.time() + 120
    while not marker.exists():
        assert first.poll() is None, "finetune exited before checkpoint 10"
        assert time.time() < deadline, "checkpoint 10 never appeared"
        time.sleep(0.05)
    before = {p: p.stat().st_mtime_ns for p in run.rglob("*") if p.is_file() and p.name != LOCK_FILE}
    t0 = time.time()
    with pytest.raises(FolderInUse) as err:
        finetune(job)
    msg = str(err.value)
    assert time.time() - t0 < 5  # at once, no waiting
    assert f"run folder {run} is in use by another finetune" in msg
    assert f"PID {first.pid} on host {socket.gethostname()}" in msg and f"kill {first.pid}" in msg
    assert first.poll() is None  # the first one runs on, untouched
    # the refused one wrote nothing: every file the first had is as it was (only the first writes on)
    assert all(p.stat().st_mtime_ns == m for p, m in before.items() if p.exists() and "checkpoint-10" in str(p))
    os.kill(first.pid, signal.SIGKILL)
    first.wait()
    info = finetune(job)  # the kernel released the dead holder's lock
    assert info["resumed_from"].endswith(("checkpoint-10", "checkpoint-15"))
    assert [c["step"] for c in info["checkpoints"]] == FINETUNE_STEPS
    assert all(verify_checkpoint(run / "checkpoints" / f"checkpoint-{s}")[0] for s in FINETUNE_STEPS)


HOLDER = """
import sys, time
from oodcorr.core.locks import hold
with hold(sys.argv[1]):
    print("held", flush=True)
    time.sleep(120)
"""


def test_the_lock_names_its_holder_and_goes_with_it(tmp_path):
    import socket

    from oodcorr.core.locks import LOCK_FILE, FolderInUse, check_free, hold

    folder = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(folder)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "held"
        with pytest.raises(
            FolderInUse,
            match=rf"PID {proc.pid} on host {re.escape(socket.gethostname())}, "
            r"started \d{4}-\d\d-\d\dT",
        ):
            check_free(folder)
        lock = json.loads((folder / LOCK_FILE).read_text())
        assert lock["pid"] == proc.pid and lock["host"] == socket.gethostname()
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    with hold(folder):  # free once its holder died, SIGKILL and all
        with hold(folder):  # the same process may ask again (a script, then the library it calls)
            pass
        assert json.loads((folder / LOCK_FILE).read_text())["pid"] == os.getpid()
    assert (folder / LOCK_FILE).read_text() == ""  # a clean release leaves no name behind
    check_free(folder)
    check_free(tmp_path / "not-yet")  # a run folder that does not exist is free, and checking creates nothing
    assert not (tmp_path / "not-yet").exists()


def test_a_holder_that_exited_but_left_a_child_is_named_as_such(tmp_path):
    """The recorded PID is gone, yet the lock is held (a process it started inherited it)."""
    from oodcorr.core.locks import FolderInUse, check_free

    folder = tmp_path / "run"
    spawner = (
        "import os, sys, time\nfrom oodcorr.core.locks import hold\n"
        "with hold(sys.argv[1]):\n"
        "    child = os.fork()\n"  # the child shares the open lock file, and so the lock
        "    if child == 0:\n        time.sleep(120)\n        os._exit(0)\n"
        "    print(child, flush=True)\n    os._exit(0)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", spawner, str(folder)], stdout=subprocess.PIPE, text=True)
    child = int(proc.stdout.readline())
    proc.wait()
    try:
        with pytest.raises(
            FolderInUse,
            match=rf"PID {proc.pid} .*which has exited, but a process it started "
            r"still holds the lock \(`fuser -v .*finetune\.lock` shows it\)",
        ):
            check_free(folder)
    finally:
        os.kill(child, signal.SIGKILL)
    deadline = time.time() + 30
    while True:
        try:
            check_free(folder)
            break
        except FolderInUse:
            assert time.time() < deadline
            time.sleep(0.1)


# ---- verified checkpoints: hashes, once -----------------------------------------------------


def test_a_damaged_checkpoint_with_its_size_intact_is_trained_again_on_rerun(tmp_path, tiny_models):
    """`--forcerun finetune` (the job's manifest deleted, every checkpoint present): a checkpoint whose
    bytes changed (same size, mtime set back) must not let the run count as complete."""
    job = finetune_job(tmp_path, tiny_models["opt"], "forcerun")
    finetune(job)
    ckroot = job.run_dir / "checkpoints"
    good = {k: v.clone() for k, v in checkpoint_weights(job.run_dir, 10).items()}  # not a view of the file
    w = ckroot / "checkpoint-10" / "model.safetensors"
    st = w.stat()
    data = bytearray(w.read_bytes())
    data[-100] ^= 0xFF  # one byte of the weights flipped, size unchanged
    w.write_bytes(bytes(data))
    os.utime(w, ns=(st.st_atime_ns, st.st_mtime_ns))  # and the mtime put back
    assert w.stat().st_size == st.st_size and w.stat().st_mtime_ns == st.st_mtime_ns
    job.manifest_path.unlink()
    info = finetune(job)
    assert info["trained"] is True
    assert len(list(ckroot.glob(".incomplete-checkpoint-10-*"))) == 1  # kept aside, never trusted
    assert all(verify_checkpoint(ckroot / f"checkpoint-{s}")[0] for s in FINETUNE_STEPS)
    again = checkpoint_weights(job.run_dir, 10)
    for k in good:  # trained again to the same weights (CPU determinism)
        torch.testing.assert_close(again[k], good[k], atol=1e-6, rtol=0)


def test_hashes_are_computed_once_and_a_changed_file_is_hashed_again(tmp_path, tiny_models, monkeypatch):
    import oodcorr.jobs.checkpoints as ck_module

    job = finetune_job(tmp_path, tiny_models["opt"], "cache")
    job = replace(job, steps=[0, 5], max_steps=5)
    finetune(job)
    ckpt = job.run_dir / "checkpoints" / "checkpoint-5"
    calls = []
    real = ck_module.sha256_file
    monkeypatch.setattr(
        ck_module,
        "sha256_file",
        lambda p, *a: ("checkpoints" in Path(p).parts and calls.append(Path(p).name)) or real(p, *a),
    )
    assert verify_checkpoint(ckpt, full=True) == (True, "ok")
    assert calls == []  # hashed when saved: not again
    job.manifest_path.unlink()
    assert finetune(job)["trained"] is False and calls == []  # a rerun of a complete run hashes nothing
    w = ckpt / "model.safetensors"
    w.write_bytes(w.read_bytes())  # rewritten with the same bytes: a new ctime
    assert verify_checkpoint(ckpt, full=True) == (True, "ok") and calls == ["model.safetensors"]
    assert verify_checkpoint(ckpt, full=True) == (True, "ok") and calls == ["model.safetensors"]


def test_pruning_never_drops_the_resume_point(tmp_path, tiny_models, monkeypatch):
    """A checkpoint saved without intact optimizer state must not take the older resume point's away."""
    import shutil

    import oodcorr.jobs.checkpoints as checkpoints

    job = finetune_job(tmp_path, tiny_models["opt"], "keep")
    ckroot = job.run_dir / "checkpoints"
    _interrupted(monkeypatch, job, after_step=12)
    assert find_resume_point(ckroot, FINETUNE_STEPS) == ckroot / "checkpoint-10"
    c15 = ckroot / "checkpoint-15"  # saved, but its optimizer state did not make it whole
    shutil.copytree(ckroot / "checkpoint-10", c15)
    (c15 / MANIFEST).unlink()
    checkpoints.write_ckpt_manifest(c15, 15, resumable=True)
    opt = c15 / "optimizer.pt"
    opt.write_bytes(bytes(b ^ 0xFF for b in opt.read_bytes()))
    checkpoints.prune_resume_state(ckroot, keep=c15)
    assert checkpoints.is_resumable(ckroot / "checkpoint-10")
    assert find_resume_point(ckroot, FINETUNE_STEPS) == ckroot / "checkpoint-10"
    # a healthy newer save does take over, and the older state goes
    shutil.rmtree(c15)
    shutil.copytree(ckroot / "checkpoint-10", c15)
    (c15 / MANIFEST).unlink()
    checkpoints.write_ckpt_manifest(c15, 15, resumable=True)
    checkpoints.prune_resume_state(ckroot, keep=c15)
    assert not (ckroot / "checkpoint-10" / "optimizer.pt").exists() and checkpoints.is_resumable(c15)


def test_a_non_finite_loss_stops_the_run_before_the_next_checkpoint(tmp_path, tiny_models, monkeypatch):
    """Label scores that turn NaN at step 8 (as a diverged run's do): the run stops with the step
    and what to change; checkpoints 0 and 5 stay, no later one is saved. (Before: the Trainer's
    logging filters NaN losses out, and the run saved checkpoints 10..20.)"""
    from oodcorr.jobs.finetune import NonFiniteLoss
    from oodcorr.modeling.adaptation import Pattern

    calls = {"n": 0}
    orig = Pattern.label_logits

    def label_logits(model, input_ids, attention_mask, extra):
        out = orig(model, input_ids, attention_mask, extra)
        calls["n"] += 1
        return out * float("nan") if calls["n"] >= 8 and model.training else out

    monkeypatch.setattr(Pattern, "label_logits", staticmethod(label_logits))
    job = finetune_job(tmp_path, tiny_models["opt"], "nan")
    with pytest.raises(NonFiniteLoss) as e:
        finetune(job)
    msg = str(e.value)
    assert "step 8 of 20" in msg and "learning_rate" in msg and "up to step 5" in msg
    ckroot = job.run_dir / "checkpoints"
    assert sorted(p.name for p in ckroot.glob("checkpoint-*")) == ["checkpoint-0", "checkpoint-5"]
