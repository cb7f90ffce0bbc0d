"""Folders that cannot be locked or written: a file system that refuses flock (a real LD_PRELOAD
shim on libc's flock), a folder of another user and a read-only mount (the writer a real other
uid, since root bypasses modes). The writer never goes on unlocked, and the sentence says what to do."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import textwrap
from pathlib import Path

import pytest

from oodcorr.core.locks import EXPERIMENT, LOCK_DIR_ENV, FolderInUse, hold, lock_path

from faults import PYTHON, as_nobody, flock_refusing_shim, python_env, read_only_mount

# a child that takes a folder's lock (of the kind named) and says what happened, in one line
TAKE = textwrap.dedent(
    """
    import sys
    from oodcorr.core import locks
    try:
        with locks.hold(sys.argv[1], getattr(locks, sys.argv[2])):
            print("HELD")
    except locks.FolderInUse as e:
        print(type(e).__name__ + ": " + str(e))
    """
)


def _take(folder, kind="EXPERIMENT", prefix=(), **env):
    r = subprocess.run(
        [*prefix, PYTHON, "-c", TAKE, str(folder), kind],
        capture_output=True,
        text=True,
        env=python_env(**env),
        timeout=120,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout.strip()


@pytest.mark.parametrize("kind", ["EXPERIMENT", "FINETUNE", "PUBLISH"])
def test_a_file_system_that_refuses_flock_stops_the_writer_and_says_to_lock_elsewhere(tmp_path, kind):
    shim = flock_refusing_shim(tmp_path)
    nfs = tmp_path / "nfs" / "results" / "exp"
    nfs.mkdir(parents=True)
    out = _take(nfs, kind, LD_PRELOAD=str(shim), NOFLOCK_UNDER=str(tmp_path / "nfs"))
    assert out.startswith("LocksRefused: "), out  # not HELD: never unlocked
    assert str(nfs) in out and LOCK_DIR_ENV in out and "this host only" in out


def test_with_a_local_lock_folder_the_lock_is_taken_there_and_still_keeps_a_second_writer_out(tmp_path):
    shim = flock_refusing_shim(tmp_path)
    nfs = tmp_path / "nfs" / "exp"
    nfs.mkdir(parents=True)
    local = tmp_path / "local-locks"
    env = dict(LD_PRELOAD=str(shim), NOFLOCK_UNDER=str(tmp_path / "nfs"), **{LOCK_DIR_ENV: str(local)})
    assert _take(nfs, **env) == "HELD"
    # held by a live process (this one), the same folder is refused to a child using the same lock folder
    import os

    os.environ[LOCK_DIR_ENV] = str(local)
    try:
        where = lock_path(nfs, EXPERIMENT)
        assert where.parent == local.resolve() and nfs.name in where.name
        with hold(nfs, EXPERIMENT):
            out = _take(nfs, **env)
        assert out.startswith("FolderInUse: ") and str(where) in out, out
    finally:
        del os.environ[LOCK_DIR_ENV]


@pytest.fixture
def open_tmp():
    """A folder another user can reach (pytest's own is private to root)."""
    d = Path(tempfile.mkdtemp(prefix="oodcorr-faults-"))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_another_users_results_folder_is_refused_naming_its_owner(open_tmp):
    prefix = as_nobody()
    tmp_path = open_tmp
    exp = tmp_path / "results" / "exp"
    exp.mkdir(parents=True)  # root's, 0755: nobody may not write it
    out = _take(exp, prefix=prefix)
    assert out.startswith("FolderNotWritable: "), out
    assert "belongs to user root" in out and str(exp) in out
    assert not (exp / EXPERIMENT.file).exists()


def test_a_lock_folder_elsewhere_does_not_hide_a_results_folder_that_cannot_be_written(open_tmp):
    prefix = as_nobody()
    tmp_path = open_tmp
    exp = tmp_path / "results" / "exp"
    exp.mkdir(parents=True)
    locks = tmp_path / "locks"
    locks.mkdir(mode=0o777)
    locks.chmod(0o777)
    out = _take(exp, prefix=prefix, **{LOCK_DIR_ENV: str(locks)})
    assert out.startswith("FolderNotWritable: "), out


def test_a_results_folder_on_a_read_only_mount_is_refused(tmp_path):
    exp = tmp_path / "ro" / "exp"
    exp.mkdir(parents=True)
    with read_only_mount(tmp_path / "ro"):
        with pytest.raises(FolderInUse) as e:
            with hold(exp, EXPERIMENT):
                pass
        assert type(e.value).__name__ == "FolderNotWritable" and "read-only file system" in str(e.value)
