"""A finetune under the faults of a cluster: a full scratch disk (a real ENOSPC on a small tmpfs), an I/O
error while a checkpoint is saved (EIO from write(), an LD_PRELOAD shim) and preemption (a real SIGTERM,
then SIGKILL after the grace time, then the same job again). Nothing half-written is taken for a
checkpoint, the rerun resumes from the last whole one, and it ends with the weights of an uninterrupted
run, every step trained once."""

from __future__ import annotations

import errno
import json
import subprocess
import textwrap
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from oodcorr.core.errors import DiskFull
from oodcorr.core.filesystems import file_system
from oodcorr.jobs.checkpoints import MANIFEST, verify_checkpoint
from oodcorr.jobs.finetune import finetune
from oodcorr.planning.finetune_job import FinetuneJob

from faults import (
    PYTHON,
    fill,
    preempt,
    python_env,
    small_filesystem,
    start_stopped,
    wait_for,
    write_refusing_shim,
)
from helpers import FINETUNE_STEPS, finetune_job

STEPS = FINETUNE_STEPS
pytestmark = pytest.mark.slow  # real finetunes, in child processes for the signals


def _job(data: Path, built_model_dir, run: Path) -> FinetuneJob:
    return finetune_job(data, built_model_dir, run)


def _weights(run_dir: Path, step: int) -> dict:
    return load_file(run_dir / "checkpoints" / f"checkpoint-{step}" / "model.safetensors")


@pytest.fixture(scope="module")
def reference(tmp_path_factory, tiny_models):
    """An uninterrupted run: the weights every interrupted one must end with."""
    d = tmp_path_factory.mktemp("ref")
    job = _job(d, tiny_models["opt"], d / "run")
    finetune(job)
    return job


def _same_weights(a: Path, b: Path) -> None:
    for step in STEPS:
        wa, wb = _weights(a, step), _weights(b, step)
        for k in wa:  # CPU training is deterministic: resumed == uninterrupted to 1e-6
            torch.testing.assert_close(wa[k], wb[k], atol=1e-6, rtol=0)


def _every_step_once(job: FinetuneJob) -> None:
    """The run's loss history (logged at every step: logging_steps is max_steps // 20): each of
    steps 1..20 once, in order, those before the resume point included (nothing lost, none twice)."""
    info = json.loads(job.manifest_path.read_text())
    assert [h["step"] for h in info["loss_history"]] == list(range(1, 21))


# ---- a full disk -----------------------------------------------------------------------------


def test_a_run_whose_checkpoints_cannot_fit_is_refused_before_training(tmp_path, tiny_models):
    with small_filesystem(tmp_path / "scratch", "512k") as fs:
        job = _job(tmp_path, tiny_models["opt"], fs / "run")
        with pytest.raises(DiskFull) as e:
            finetune(job)
        msg = str(e.value)
        assert str(job.run_dir) in msg and "bytes" in msg and "checkpoint" in msg
        assert not job.manifest_path.exists()
        # nothing half-written: whatever checkpoint is there is whole
        for d in (job.run_dir / "checkpoints").glob("checkpoint-*"):
            assert verify_checkpoint(d)[0], d


def test_a_disk_that_fills_during_a_save_loses_only_that_checkpoint_and_the_rerun_resumes(
    tmp_path, tiny_models, reference, monkeypatch
):
    import oodcorr.jobs.finetune as f

    with small_filesystem(tmp_path / "scratch", "64m") as fs:
        job = _job(tmp_path, tiny_models["opt"], fs / "run")
        orig = f._make_trainer_classes

        def filling():  # another job's files fill the scratch disk after checkpoint 10
            T, S = orig()

            class Filling(S):
                def on_step_end(self, args, state, control, **kw):
                    if state.global_step == 12:
                        fill(fs, leave=16 * 1024)
                    return super().on_step_end(args, state, control, **kw)

            return T, Filling

        monkeypatch.setattr(f, "_make_trainer_classes", filling)
        with pytest.raises(DiskFull) as e:
            finetune(job)
        msg = str(e.value)
        assert "checkpoint-15" in msg and str(job.run_dir / "checkpoints") in msg and "bytes" in msg
        assert not (job.run_dir / "checkpoints" / "checkpoint-15").exists()  # the half-written one is gone
        assert all(verify_checkpoint(job.run_dir / "checkpoints" / f"checkpoint-{s}")[0] for s in (0, 5, 10))
        assert not job.manifest_path.exists()

        (fs / ".filler").unlink()  # the user deletes what the sentence named
        monkeypatch.setattr(f, "_make_trainer_classes", orig)
        info = finetune(job)
        assert info["resumed_from"].endswith("checkpoint-10")
        _same_weights(reference.run_dir, job.run_dir)
        _every_step_once(job)


# ---- preemption: SIGTERM, SIGKILL after the grace time, the same job again ---------------------

# The finetune of a job, stopped at a point: after the step named (``step``), or inside the save of
# checkpoint 15 with its weights written and its manifest not yet (``save``). There it writes the
# file named and blocks, as a long step or a slow disk would, until the signals come.
STOPPED = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    import oodcorr.jobs.finetune as f
    from oodcorr.planning.finetune_job import FinetuneJob
    job, where, at, reached = FinetuneJob.from_json(sys.argv[1]), sys.argv[2], int(sys.argv[3]), Path(sys.argv[4])

    def stop_here():
        reached.write_text("here")
        while True:
            time.sleep(1)

    if where == "step":
        orig = f._make_trainer_classes
        def classes():
            T, S = orig()
            class Stopping(S):
                def on_step_end(self, args, state, control, **kw):
                    out = super().on_step_end(args, state, control, **kw)
                    if state.global_step == at:
                        stop_here()
                    return out
            return T, Stopping
        f._make_trainer_classes = classes
    else:
        write = f.write_ckpt_manifest
        def manifest(d, step, resumable):
            if step == at:
                stop_here()
            return write(d, step, resumable)
        f.write_ckpt_manifest = manifest
    f.finetune(job)
    """
)


@pytest.mark.parametrize(("where", "at"), [("step", 12), ("save", 15)])
def test_a_preempted_finetune_resumes_from_its_last_whole_checkpoint(tmp_path, tiny_models, reference, where, at):
    job = _job(tmp_path, tiny_models["opt"], tmp_path / "run")
    reached = tmp_path / "reached"
    proc = start_stopped(STOPPED, job.to_json(), where, str(at), str(reached))
    wait_for(reached, proc)
    status = preempt(proc, grace=2.0)
    assert status != 0
    assert not job.manifest_path.exists()
    ck = job.run_dir / "checkpoints"
    assert not (ck / "checkpoint-20").exists()
    # the requeued job: the same finetune again
    info = finetune(job)
    assert info["resumed_from"].endswith("checkpoint-10")
    assert [c["step"] for c in info["checkpoints"]] == STEPS
    if where == "save":  # the checkpoint cut off before its manifest was set aside, never trusted
        assert list(job.run_dir.glob("checkpoints/.incomplete-checkpoint-15-*"))
        assert not list(job.run_dir.glob("checkpoints/.incomplete-checkpoint-15-*/" + MANIFEST))
    _same_weights(reference.run_dir, job.run_dir)
    _every_step_once(job)


# ---- an I/O error while a checkpoint is written (issue 47) ----------------------------------------
# a finetune in a child (for the LD_PRELOAD shim), saying the error it stopped with in one line
SAVE_FAILS = textwrap.dedent(
    """
    import sys
    from oodcorr.jobs.finetune import finetune
    from oodcorr.planning.finetune_job import FinetuneJob
    try:
        finetune(FinetuneJob.from_json(sys.argv[1]))
    except Exception as e:
        print(type(e).__name__ + ": " + str(e))
        sys.exit(3)
    """
)


@pytest.mark.parametrize(("step", "resumed"), [(0, None), (10, "checkpoint-5")])
def test_an_io_error_while_a_checkpoint_is_saved_names_it_and_its_file_system_and_the_rerun_resumes(
    tmp_path, tiny_models, reference, step, resumed
):
    """safetensors says ``SafetensorError: Error while serializing: I/O error`` (no errno): before, that and
    a traceback were all. Step 0 is saved by save_pretrained before training, step 10 by the Trainer."""
    shim = write_refusing_shim(tmp_path)
    job = _job(tmp_path, tiny_models["opt"], tmp_path / "run")
    ck = job.run_dir / "checkpoints"
    failing = ck / f"checkpoint-{step}"
    env = python_env(LD_PRELOAD=str(shim), FAILWRITE_UNDER=str(failing), FAILWRITE_ERRNO=str(errno.EIO))
    r = subprocess.run([PYTHON, "-c", SAVE_FAILS, job.to_json()], capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 3, (r.stdout + r.stderr)[-3000:]
    out = r.stdout.strip().splitlines()[-1]  # the Trainer prints its losses before
    assert out.startswith("WriteFailed: "), out
    assert f"checkpoint-{step}" in out and str(ck) in out, out  # which file, which folder
    assert "input/output error (EIO)" in out and f"file system {file_system(ck)}" in out, out
    assert "It is safe to run again" in out and "Traceback" not in r.stderr, out
    assert not failing.exists()  # the half-written checkpoint is gone
    assert all(verify_checkpoint(ck / f"checkpoint-{s}")[0] for s in STEPS if s < step)
    assert not job.manifest_path.exists()

    info = finetune(job)  # the disk is whole again: the same job
    assert (info["resumed_from"] or "").endswith(resumed or "") and bool(info["resumed_from"]) == bool(resumed)
    _same_weights(reference.run_dir, job.run_dir)
    _every_step_once(job)
