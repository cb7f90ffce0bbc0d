"""Lock files on a shared machine (oodcorr.core.locks; issue 25, class 6).

* A lock file is opened without following a link and refused unless it is a regular file with one
  name: a ``finetune.lock`` that is a symbolic link made the run truncate and overwrite the file it
  points to, outside ``results/``. (A GPU claim's lock: tests/core/test_gpus.py.)
* A lock held by a live process of this host is named as such (from ``/proc/locks``), whatever
  host the lock file names; one held from another host says so and what to do there.

File modes (class 8): tests/jobs/test_checkpoints.py, tests/modeling/test_tiny.py; the end-of-run
line: tests/launch/test_disk_checks.py.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from oodcorr.core.locks import FolderInUse, check_free, hold

from helpers import PRECIOUS


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


def test_a_lock_file_that_is_a_hard_link_no_run_holds_is_made_anew_and_the_other_file_untouched(tmp_path, victim):
    run = tmp_path / "run"
    run.mkdir()
    lock = run / "finetune.lock"
    os.link(victim, lock)
    with hold(run):
        assert lock.stat().st_nlink == 1 and not lock.samefile(victim)
    assert victim.read_text() == PRECIOUS and victim.stat().st_nlink == 1


@pytest.mark.parametrize("kind", ["folder", "fifo"])
def test_a_lock_path_that_is_not_a_regular_file_is_refused(tmp_path, victim, kind):
    run = tmp_path / "run"
    run.mkdir()
    lock = run / "finetune.lock"
    if kind == "folder":
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
