"""Lock files and file modes on a shared machine (issue 25, classes 6 and 8).

* A lock file is opened without following a link and refused unless it is a regular file with one
  name: a ``finetune.lock`` (or a GPU claim's lock in the shared ``/tmp``) that is a symbolic link
  made the run truncate and overwrite the file it points to, outside ``results/``.
* The default GPU lock folder in ``/tmp`` must be this user's own.
* A lock held by a live process of this host is named as such (from ``/proc/locks``), whatever
  host the lock file names; one held from another host says so and what to do there.
* Saved weights follow the umask like every other result (safetensors leaves them 0600).
* The end-of-run line names the published partial correlations, never ``.staging/``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from oodcorr.core.locks import FolderInUse, check_free, hold

from helpers import micro_plan

PRECIOUS = "my thesis, chapter 3\n"


@pytest.fixture
def victim(tmp_path):
    """A file outside the run folder that a link in it points at."""
    path = tmp_path / "home" / "thesis.txt"
    path.parent.mkdir()
    path.write_text(PRECIOUS)
    return path


# ---- class 6: a lock file never follows a link ----------------------------------------------------
def test_a_finetune_lock_that_is_a_symlink_is_refused_and_what_it_points_to_is_untouched(tmp_path, victim):
    run = tmp_path / "results/x/finetune/m/d/n4/seed0"
    run.mkdir(parents=True)
    (run / "finetune.lock").symlink_to(victim)
    for attempt in (lambda: hold(run).__enter__(), lambda: check_free(run)):
        with pytest.raises(FolderInUse) as e:
            attempt()
        assert str(e.value) == (
            f"{run.resolve()}/finetune.lock is a symbolic link (to {victim}), where a lock file belongs: writing "
            "the holder's details into it would overwrite what it points to. Remove the link (`rm "
            f"{run.resolve()}/finetune.lock`; the file it points to is untouched) and run again"
        )
    assert victim.read_text() == PRECIOUS and victim.stat().st_nlink == 1


def test_a_dangling_lock_link_creates_nothing_where_it_points(tmp_path):
    """O_CREAT through a link would create the file it names, wherever that is."""
    run = tmp_path / "run"
    run.mkdir()
    target = tmp_path / "elsewhere" / "planted.txt"
    target.parent.mkdir()
    (run / "finetune.lock").symlink_to(target)
    with pytest.raises(FolderInUse, match=r"is a symbolic link"):
        with hold(run):
            pass
    assert not target.exists()


@pytest.mark.parametrize("kind", ["hard link", "folder", "fifo"])
def test_a_lock_path_that_is_not_a_regular_file_of_its_own_is_refused(tmp_path, victim, kind):
    run = tmp_path / "run"
    run.mkdir()
    lock = run / "finetune.lock"
    if kind == "hard link":
        os.link(victim, lock)
        expect = r"finetune\.lock has 2 names \(hard links\), so writing to it would change another file too"
    elif kind == "folder":
        lock.mkdir()
        expect = r"finetune\.lock is a folder, where a lock file belongs; move it away and run again"
    else:
        os.mkfifo(lock)
        expect = r"finetune\.lock is not a regular file, where a lock file belongs; move it away \(`mv "
    with pytest.raises(FolderInUse, match=expect):
        with hold(run):
            pass
    assert victim.read_text() == PRECIOUS


def test_a_run_folder_reached_through_a_link_is_still_locked(tmp_path):
    """results/ on scratch space behind a link is common on clusters: the folder may be a link, the
    lock file inside it may not."""
    real = tmp_path / "scratch/run"
    real.mkdir(parents=True)
    (tmp_path / "results").symlink_to(tmp_path / "scratch")
    with hold(tmp_path / "results/run") as held:
        assert held.path == real.resolve() / "finetune.lock" and json.loads(held.path.read_text())["pid"]
        other = subprocess.run(  # another process sees it held, through the link
            [sys.executable, "-c", "import sys; from oodcorr.core.locks import hold\nwith hold(sys.argv[1]): pass"]
            + [str(tmp_path / "results/run")],
            capture_output=True,
            text=True,
        )
        assert other.returncode != 0 and "is in use by another finetune" in other.stderr, other.stderr[-2000:]
    assert (real / "finetune.lock").read_text() == ""  # released cleanly: nothing left to misread


def test_a_gpu_lock_that_is_a_symlink_is_refused_and_its_target_untouched(tmp_path, victim):
    from oodcorr.core.gpus import claim

    pool = tmp_path / "pool"
    pool.mkdir()
    (pool / "gpu-0.lock").symlink_to(victim)
    with pytest.raises(FolderInUse, match=r"gpu-0\.lock is a symbolic link \(to .*thesis\.txt\)"):
        claim(1, devices=["0"], lock_dir=pool, timeout=0)
    assert victim.read_text() == PRECIOUS


def test_the_default_gpu_lock_folder_in_tmp_must_be_this_users_own(tmp_path, monkeypatch):
    """Its name (/tmp/oodcorr-gpus-<uid>) is guessable: another user could make it first, writable by
    all, and plant links or hold every device. A folder given on purpose (OODCORR_GPU_LOCK_DIR) may be
    shared."""
    import tempfile

    from oodcorr.core import gpus

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.delenv(gpus.LOCK_DIR_ENV, raising=False)
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    default = gpus.default_lock_dir()
    assert default.parent == tmp_path
    with gpus.claim(1, devices=["0"], timeout=0) as c:  # made here: private
        assert c.devices == ["0"] and (default.stat().st_mode & 0o777) == 0o700
    os.chmod(default, 0o777)
    with pytest.raises(FolderInUse, match=rf"{re.escape(str(default))} \(the GPU lock folder\) belongs to user id "):
        gpus.claim(1, devices=["0"], timeout=0)
    shutil.rmtree(default)
    elsewhere = tmp_path / "planted"
    elsewhere.mkdir()
    default.symlink_to(elsewhere)
    with pytest.raises(FolderInUse, match=r"\(the GPU lock folder\) is not a folder but a link or a file"):
        gpus.claim(1, devices=["0"], timeout=0)
    assert list(elsewhere.iterdir()) == []
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    os.chmod(shared, 0o777)
    monkeypatch.setenv(gpus.LOCK_DIR_ENV, str(shared))
    with gpus.claim(1, devices=["0"], timeout=0) as c:  # named on purpose: shared is fine
        assert c.lock_dir == shared


# ---- class 8: who holds a lock, as far as this host can tell ---------------------------------------
def _holder_process(lock: Path, info: dict | None):
    """A process that takes the flock on ``lock`` itself (as a finetune's child, an earlier version, or
    `flock` would), after writing ``info`` as the holder's details."""
    code = (
        "import fcntl, os, sys, time\n"
        "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX)\n"
        "os.ftruncate(fd, 0); os.pwrite(fd, sys.argv[2].encode(), 0)\n"
        "print('held', flush=True)\n"
        "time.sleep(600)\n"
    )
    p = subprocess.Popen(
        [sys.executable, "-c", code, str(lock), json.dumps(info) if info else ""], stdout=subprocess.PIPE, text=True
    )
    assert p.stdout.readline().strip() == "held"
    return p


def _refused_while_held(run, info):
    """(the process that held ``run``'s lock, having written ``info`` into it; the refusal a
    second ``hold`` got meanwhile). The holder is gone when this returns."""
    holder = _holder_process(run / "finetune.lock", info)
    try:
        with pytest.raises(FolderInUse) as e:
            with hold(run):
                pass
    finally:
        holder.kill()
        holder.wait()
    return holder, str(e.value)


@pytest.mark.skipif(not Path("/proc/locks").exists(), reason="/proc/locks (Linux) names the holder of an flock")
def test_a_lock_held_here_whose_file_names_another_host_names_the_live_process_here(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    stale = {"pid": 4242, "host": "node-17.cluster", "started": "2026-11-30T03:00:00+00:00", "slurm_job_id": "991"}
    holder, refusal = _refused_while_held(run, stale)
    here = socket.gethostname()
    assert refusal == (
        f"run folder {run} is in use by another finetune (it holds {run.resolve()}/finetune.lock): the lock is held "
        f"by a live process on this host ({here}): PID {holder.pid}, per /proc/locks; the lock file names PID 4242 "
        "on host node-17.cluster, started 2026-11-30T03:00:00+00:00, which wrote it last. See what it is with "
        f"`ps -o pid,etime,args -p {holder.pid}` (or `fuser -v {run.resolve()}/finetune.lock`); stop it "
        f"(`kill {holder.pid}`) or wait for it to finish, then run again: the lock goes with the process, there is "
        "nothing to delete"
    )
    with hold(run):  # free again once that process is gone
        pass


def test_a_lock_held_from_another_host_says_so_and_what_to_do_there(tmp_path, monkeypatch):
    """Over NFS or Lustre the holder is on another node: /proc/locks here does not list it."""
    import oodcorr.core.locks as locks

    run = tmp_path / "run"
    run.mkdir()
    info = {"pid": 4242, "host": "node-17.cluster", "started": "2026-11-30T03:00:00+00:00", "slurm_job_id": "991"}
    monkeypatch.setattr(locks, "local_holders", lambda fd: [])  # as on a node that does not hold it
    holder, msg = _refused_while_held(run, info)
    assert msg.endswith(
        "PID 4242 on host node-17.cluster, started 2026-11-30T03:00:00+00:00, SLURM job 991. No process on this "
        f"host ({socket.gethostname()}) holds the lock, so it is held from another host, the one the file names as "
        "far as it knows. On node-17.cluster, see it with `ps -o pid,etime,args -p 4242`, then stop it (`kill 4242` "
        "(or `scancel 991`)) or wait for it to finish, and run again: the lock goes with the process, there is "
        "nothing to delete"
    ), msg


@pytest.mark.skipif(not Path("/proc/locks").exists(), reason="/proc/locks (Linux) names the holder of an flock")
def test_local_holders_reads_proc_locks_for_this_file_only(tmp_path):
    from oodcorr.core.locks import local_holders

    a, b = tmp_path / "a.lock", tmp_path / "b.lock"
    holder = _holder_process(a, None)
    try:
        fd_a, fd_b = os.open(a, os.O_RDONLY), os.open(b, os.O_RDONLY | os.O_CREAT)
        assert local_holders(fd_a) == [holder.pid] and local_holders(fd_b) == []
        os.close(fd_a)
        os.close(fd_b)
    finally:
        holder.kill()
        holder.wait()


# ---- class 8: weights follow the umask -------------------------------------------------------------
@pytest.mark.parametrize("umask", [0o022, 0o027])
def test_a_saved_checkpoint_follows_the_umask_like_every_other_result(tmp_path, umask):
    """safetensors writes through a temporary file and leaves model.safetensors at 0600, so a
    colleague in your group could not evaluate your checkpoints; its manifest was 0644."""
    import torch
    from safetensors.torch import save_file

    from oodcorr.jobs.checkpoints import verify_checkpoint, write_ckpt_manifest

    old = os.umask(umask)
    try:
        ckpt = tmp_path / "checkpoint-4"
        ckpt.mkdir()
        save_file({"w": torch.zeros(4)}, str(ckpt / "model.safetensors"))
        torch.save({"state": 1}, ckpt / "optimizer.pt")
        (ckpt / "config.json").write_text("{}")
        write_ckpt_manifest(ckpt, 4, resumable=True)
    finally:
        os.umask(old)
    want = 0o666 & ~umask
    modes = {f.name: f.stat().st_mode & 0o777 for f in ckpt.iterdir()}
    assert modes == dict.fromkeys(modes, want), {k: oct(v) for k, v in modes.items()}
    assert verify_checkpoint(ckpt, full=True)[0]  # the mode was set before the hashes' stat was recorded


def test_a_built_tiny_model_follows_the_umask(tmp_path):
    from oodcorr.modeling.tiny import build_pretrained

    from helpers import TINY_CONFIGS

    old = os.umask(0o022)
    try:
        spec = {
            "model_type": "opt",
            "vocab_size": 300,
            "config": TINY_CONFIGS["opt"],
            "pretrain": {"steps": 1, "batch_size": 2},
        }
        build_pretrained("t", spec, ["the cat sat on the mat"] * 20, tmp_path / "tiny", seed=0)
    finally:
        os.umask(old)
    weights = tmp_path / "tiny/model.safetensors"
    assert weights.stat().st_mode & 0o777 == 0o644
    assert {f.stat().st_mode & 0o777 for f in (tmp_path / "tiny").iterdir() if f.is_file()} == {0o644}


# ---- class 8: the success line names the published table ------------------------------------------
def test_the_end_of_run_lines_name_the_published_results_never_staging(tmp_path, monkeypatch):

    from oodcorr.launch.disk_checks import end_of_run_report

    from helpers import REPO

    monkeypatch.chdir(tmp_path)
    plan = micro_plan()
    lines = end_of_run_report(plan, failed=False)
    assert lines[-1] == (
        "oodcorr: scores in results/micro/scores.csv, partial correlations in "
        "results/micro/analysis/partial_correlations.csv, heatmaps in results/micro/analysis/heatmaps/"
    )
    assert not any(".staging" in line for line in lines)
    # nothing published yet: no line says the previous results are kept
    assert not any("previous results" in line for line in end_of_run_report(plan, failed=True))
    snakefile = (REPO / "Snakefile").read_text()
    assert "end_of_run_report(PLAN, failed=False)" in snakefile and "end_of_run_report(PLAN, failed=True)" in snakefile


def test_the_end_of_run_handlers_survive_a_truncated_dataset_meta_file(tmp_path, monkeypatch):
    """The handler itself crashed (JSONDecodeError in onsuccess) on a meta file cut short; now the
    file is a warning naming it and what to do, and the rest of the report follows."""

    from oodcorr.launch.disk_checks import end_of_run_warnings

    monkeypatch.chdir(tmp_path)
    plan = micro_plan()
    meta = Path("results/micro/data/synth-test.meta.json")
    meta.parent.mkdir(parents=True)
    meta.write_text('{"name": "synth-test", "n": 60, "warn')
    warnings = end_of_run_warnings(plan)
    assert warnings == [
        f"{meta}: the description of prepared dataset 'synth-test' is unreadable (JSONDecodeError: Unterminated "
        "string starting at: line 1 column 33 (char 32)); delete it and run again: the dataset is prepared again"
    ]


def test_prompts_all_cut_are_said_at_the_end_of_the_run_even_beside_an_unreadable_meta_file(tmp_path, monkeypatch):
    """Every prompt cut to max_length was said only in the job logs when the handler stopped on an
    unreadable meta file first; now both lines are printed, the 100 % case in words of its own."""

    from oodcorr.launch.disk_checks import end_of_run_report

    monkeypatch.chdir(tmp_path)
    plan = micro_plan()
    meta = Path("results/micro/data/synth-test.meta.json")
    meta.parent.mkdir(parents=True)
    meta.write_text("{")
    info = Path("results/micro/cache/tokenized/micro-opt/synth-overlap.info.json")
    info.parent.mkdir(parents=True)
    info.write_text(json.dumps({"n": 60, "n_truncated": 60, "max_length": 8}))
    lines = end_of_run_report(plan, failed=False)
    assert any(line.startswith(f"oodcorr: WARNING: {meta}: the description of prepared dataset") for line in lines)
    assert (
        "oodcorr: WARNING: testset 'synth-overlap', model 'micro-opt': all 60 prompts (100%) are longer than "
        "evaluation.max_length (8 tokens) and were cut, keeping their end; raise evaluation.max_length to score "
        "whole examples"
    ) in lines
    assert lines[-1].startswith("oodcorr: scores in results/micro/scores.csv")
