"""The local GPU pool: concurrent GPU jobs get different devices, a killed holder frees its device."""

import os
import re
import shutil
import signal
import subprocess
import sys

import pytest

from oodcorr.core import gpus
from oodcorr.core.locks import FolderInUse

from helpers import PRECIOUS

# what a workflow script does: pick_device(), then report what it may see, then keep running
JOB = """
import os, sys, time
from oodcorr.launch.runtime import pick_device
device = pick_device(int(sys.argv[1]))
print(device, os.environ["CUDA_VISIBLE_DEVICES"], flush=True)
time.sleep(600)
"""


def _job(env, n=1):
    return subprocess.Popen([sys.executable, "-c", JOB, str(n)], stdout=subprocess.PIPE, text=True, env=env)


def _line(proc, timeout):
    """The job's report, or None if it is still waiting for a device after ``timeout`` s."""
    import selectors

    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    if not sel.select(timeout):
        return None
    return proc.stdout.readline().split()


@pytest.fixture
def env(tmp_path):
    return dict(os.environ, CUDA_VISIBLE_DEVICES="0,1", OODCORR_GPU_LOCK_DIR=str(tmp_path / "locks"))


@pytest.mark.slow
def test_two_concurrent_jobs_get_different_devices_and_a_killed_one_frees_its_own(env):
    procs = [_job(env), _job(env)]
    try:
        got = [_line(p, 60) for p in procs]
        # two simulated devices, no CUDA on this machine: each job holds its own id, runs on the CPU
        assert sorted(g[1] for g in got) == ["0", "1"] and all(g[0] == "cpu" for g in got)
        third = _job(env)
        procs.append(third)
        assert _line(third, 3) is None  # both devices taken: it waits
        os.kill(procs[0].pid, signal.SIGKILL)  # as an OOM killer would
        procs[0].wait()
        assert _line(third, 60)[1] == got[0][1]  # the dead job's device, no clean-up needed
    finally:
        for p in procs:
            p.kill()
            p.wait()


@pytest.mark.slow
def test_a_two_gpu_job_waits_for_two_free_devices(env):
    one = _job(env)
    try:
        assert _line(one, 60) is not None
        two = _job(env, n=2)
        try:
            assert _line(two, 3) is None  # one device free is not enough; it holds none meanwhile
            one.kill()
            one.wait()
            assert _line(two, 60)[1] == "0,1"
        finally:
            two.kill()
            two.wait()
    finally:
        one.kill()
        one.wait()


def test_claim_is_all_or_nothing(tmp_path):
    pool = dict(devices=["a", "b", "c"], lock_dir=tmp_path, shared=True)
    held = gpus.claim_devices(2, **pool)
    assert held.devices == ["a", "b"]
    with pytest.raises(gpus.GpuPoolError, match="no 2 free GPU"):
        gpus.claim_devices(2, **pool, timeout=0.3, poll=0.05)
    c = gpus.claim_devices(1, **pool, timeout=0)
    assert c.devices == ["c"]  # the failed claim left c free
    c.release()
    held.release()
    assert gpus.claim_devices(3, **pool, timeout=0).devices == ["a", "b", "c"]


def test_more_gpus_than_visible_is_a_clear_error(tmp_path):
    with pytest.raises(gpus.GpuPoolError, match="needs 3 GPU.*only 2 are visible"):
        gpus.claim_devices(3, devices=["0", "1"], lock_dir=tmp_path, shared=True)


@pytest.mark.parametrize(
    "cvd, expect",
    [("0,1", ["0", "1"]), ("3", ["3"]), ("", []), ("2,-1,5", ["2"]), ("GPU-8a1f,GPU-77c2", ["GPU-8a1f", "GPU-77c2"])],
)
def test_visible_devices_follow_cuda_visible_devices(cvd, expect):
    assert gpus.visible_devices({"CUDA_VISIBLE_DEVICES": cvd}) == expect


def test_no_devices_means_cpu_and_no_lock(monkeypatch, tmp_path):
    monkeypatch.setattr(gpus.shutil, "which", lambda name: None)  # no nvidia-smi
    monkeypatch.setattr(gpus, "_HELD", [])  # nothing claimed earlier in this process
    env = {"OODCORR_GPU_LOCK_DIR": str(tmp_path / "locks")}
    assert gpus.visible_devices(env) == [] and gpus.claim_for_job(1, env) == []
    assert "CUDA_VISIBLE_DEVICES" not in env and not (tmp_path / "locks").exists()


def test_lock_folder_is_per_user_and_per_slurm_job():
    uid = os.getuid()
    assert gpus.default_lock_dir({}).name == f"oodcorr-gpus-{uid}"
    assert gpus.default_lock_dir({"SLURM_JOB_ID": "42"}).name == f"oodcorr-gpus-{uid}-slurm42"
    assert str(gpus.default_lock_dir({"OODCORR_GPU_LOCK_DIR": "/x/y"})) == "/x/y"


def test_asking_again_in_the_same_process_reuses_the_claim(tmp_path, monkeypatch):
    env = {"CUDA_VISIBLE_DEVICES": "0,1", "OODCORR_GPU_LOCK_DIR": str(tmp_path)}
    monkeypatch.setattr(gpus, "_HELD", [])
    first = gpus.claim_for_job(1, env)
    assert gpus.claim_for_job(1, env) == first and env["CUDA_VISIBLE_DEVICES"] == first[0]
    for c in gpus._HELD:
        c.release()


def test_a_gpu_lock_that_is_a_symlink_is_refused_and_its_target_untouched(tmp_path, victim):
    from oodcorr.core.gpus import claim_devices

    pool = tmp_path / "pool"
    pool.mkdir()
    (pool / "gpu-0.lock").symlink_to(victim)
    with pytest.raises(FolderInUse, match=r"gpu-0\.lock is a symbolic link \(to .*thesis\.txt\)"):
        claim_devices(1, devices=["0"], lock_dir=pool, shared=True, timeout=0)
    assert victim.read_text() == PRECIOUS


def test_the_default_gpu_lock_folder_in_tmp_must_be_this_users_own(tmp_path, monkeypatch):
    """Its name (/tmp/oodcorr-gpus-<uid>) is guessable: another user could make it first, writable by
    all, and plant links or hold every device. A folder given on purpose (OODCORR_GPU_LOCK_DIR) may be
    shared."""
    import tempfile

    from oodcorr.core import gpus

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(gpus, "_HELD", [])  # nothing claimed earlier in this process
    env = {"CUDA_VISIBLE_DEVICES": "0"}
    default = gpus.default_lock_dir(env)
    assert default.parent == tmp_path
    assert gpus.claim_for_job(1, dict(env)) == ["0"] and (default.stat().st_mode & 0o777) == 0o700  # made: private
    gpus._HELD.pop().release()
    os.chmod(default, 0o777)
    with pytest.raises(FolderInUse, match=rf"{re.escape(str(default))} \(the GPU lock folder\) belongs to user id "):
        gpus.claim_for_job(1, dict(env))
    shutil.rmtree(default)
    elsewhere = tmp_path / "planted"
    elsewhere.mkdir()
    default.symlink_to(elsewhere)
    with pytest.raises(FolderInUse, match=r"\(the GPU lock folder\) is not a folder but a link or a file"):
        gpus.claim_for_job(1, dict(env))
    assert list(elsewhere.iterdir()) == []
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    os.chmod(shared, 0o777)
    assert gpus.claim_for_job(1, dict(env, OODCORR_GPU_LOCK_DIR=str(shared))) == ["0"]  # named on purpose: shared
    held = gpus._HELD.pop()
    assert held.lock_dir == shared
    held.release()
