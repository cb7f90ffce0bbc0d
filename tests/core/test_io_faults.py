"""A full disk under the atomic writes: a real ENOSPC (a small tmpfs), no inode left (a tmpfs with few),
a used-up quota and a file over the size limit (EDQUOT and EFBIG from write(), an LD_PRELOAD shim;
EFBIG also from a real ``ulimit -f``), never a mock; and the search for what can be deleted, bounded.
The other write errors: an I/O error (EIO from write(), the shim), a read-only file system (a real
read-only bind mount) and a folder of another user (a real one, written as user nobody)."""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from oodcorr.core import filesystems
from oodcorr.core.atomic_write import atomic_path, write_json_atomic
from oodcorr.core.errors import DiskFull

from faults import (
    PYTHON,
    as_nobody,
    fill,
    python_env,
    read_only_mount,
    small_filesystem,
    use_up_inodes,
    write_refusing_shim,
)


@pytest.fixture
def full_disk(tmp_path):
    with small_filesystem(tmp_path / "scratch", "512k") as fs:
        yield fs


def test_a_result_that_does_not_fit_is_refused_before_writing_and_the_old_one_stays(full_disk):
    target = full_disk / "exp" / "summary.json"
    write_json_atomic(target, {"old": True})
    fill(full_disk, leave=4096)
    big = {"x": "y" * 200_000}
    with pytest.raises(DiskFull) as e:
        write_json_atomic(target, big)
    msg = str(e.value)
    assert str(target.parent) in msg  # the folder
    needed = len((json.dumps(big, indent=2, sort_keys=True) + "\n").encode())
    assert f"{needed} bytes" in msg  # the bytes it needed, known before writing
    assert "delete" in msg  # what to do
    assert json.loads(target.read_text()) == {"old": True}
    assert not list(target.parent.glob(".*.tmp"))  # nothing half-written left


def test_a_streamed_write_that_hits_enospc_leaves_no_half_file_and_says_how_far_it_got(full_disk):
    target = full_disk / "exp" / "predictions.bin"
    target.parent.mkdir()
    target.write_bytes(b"previous")
    fill(full_disk, leave=64 * 1024)
    with pytest.raises(DiskFull) as e:
        with atomic_path(target) as tmp:  # the size is not known in advance: the write itself hits ENOSPC
            with open(tmp, "wb") as fh:
                for _ in range(64):
                    fh.write(b"z" * 16384)
                    fh.flush()
    msg = str(e.value)
    assert str(target.parent) in msg and "written when it stopped" in msg
    assert target.read_bytes() == b"previous"
    assert not list(target.parent.glob(".*.tmp"))


def test_the_sentence_names_what_a_run_left_that_can_be_deleted(full_disk):
    exp = full_disk / "exp"
    (exp / ".published").mkdir(parents=True)
    stale = exp / "finetune" / "m" / "d" / "n8" / "seed0" / "checkpoints.stale-1"
    stale.mkdir(parents=True)
    (stale / "model.safetensors").write_bytes(b"w" * 100_000)
    fill(full_disk, leave=4096)
    with pytest.raises(DiskFull) as e:
        write_json_atomic(exp / "scores" / "x.json", {"x": "y" * 50_000})
    assert str(stale) in str(e.value)


# ---- what stopped the write, told apart in the sentence (issue 39) ----------------------------------
def test_no_inode_left_with_bytes_free_is_named_as_inodes_with_df_i(tmp_path):
    with small_filesystem(tmp_path / "scratch", "1m", inodes=64) as fs:
        target = fs / "exp" / "summary.json"
        target.parent.mkdir()
        use_up_inodes(fs)
        with pytest.raises(DiskFull) as e:
            write_json_atomic(target, {"x": 1})
        msg = str(e.value)
        assert "no free inodes" in msg and f"df -i {target.parent}" in msg and "du --inodes" in msg
        assert "no room in" not in msg  # not the sentence for a disk out of bytes: those are free
        assert not target.exists() and not list(target.parent.glob(".*.tmp"))


def _write_under_shim(tmp_path, shim, folder, code: int, size: int = 100_000):
    """A child writes ``size`` bytes into ``folder`` through write_text_atomic while every write() there
    fails with ``code``; returns (exit status, its output)."""
    script = (
        "import sys\n"
        "from oodcorr.core.errors import DiskFull\n"
        "from oodcorr.core.atomic_write import atomic_path\n"
        "try:\n"
        "    with atomic_path(sys.argv[1]) as tmp:\n"
        "        with open(tmp, 'wb') as fh:\n"
        "            fh.write(b'x' * int(sys.argv[2]))\n"
        "except DiskFull as e:\n"
        "    print(e)\n"
        "    sys.exit(3)\n"
    )
    env = python_env(LD_PRELOAD=str(shim), FAILWRITE_UNDER=str(folder), FAILWRITE_ERRNO=str(code))
    r = subprocess.run(
        [PYTHON, "-c", script, str(folder / "predictions.bin"), str(size)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    return r.returncode, r.stdout + r.stderr


def test_a_used_up_quota_is_told_apart_from_a_full_disk(tmp_path):
    shim = write_refusing_shim(tmp_path)
    folder = tmp_path / "exp"
    folder.mkdir()
    rc, out = _write_under_shim(tmp_path, shim, folder, errno.EDQUOT)
    assert rc == 3, out
    assert "your disk quota" in out and "quota -s" in out and "lfs quota" in out and str(folder) in out
    assert "no room in" not in out  # the file system has room: the quota is what is used up
    assert not list(folder.iterdir())  # nothing half-written


def test_a_file_over_the_file_systems_size_limit_is_told_apart(tmp_path):
    shim = write_refusing_shim(tmp_path)
    folder = tmp_path / "exp"
    folder.mkdir()
    rc, out = _write_under_shim(tmp_path, shim, folder, errno.EFBIG)
    assert rc == 3, out
    assert "larger than allowed" in out and "takes no larger file" in out and "no room in" not in out
    assert not list(folder.iterdir())


def test_a_file_over_ulimit_f_names_the_limit(tmp_path):
    """A real EFBIG, no shim: the child's file-size limit (``ulimit -f``) is 64 KiB."""
    folder = tmp_path / "exp"
    folder.mkdir()
    script = (
        "import resource, sys\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (65536, resource.RLIM_INFINITY))\n"
        "from oodcorr.core.errors import DiskFull\n"
        "from oodcorr.core.atomic_write import write_text_atomic\n"
        "try:\n"
        "    write_text_atomic(sys.argv[1], 'x' * 200_000)\n"
        "except DiskFull as e:\n"
        "    print(e)\n"
        "    sys.exit(3)\n"
    )
    r = subprocess.run(
        [PYTHON, "-c", script, str(folder / "big.txt")], capture_output=True, text=True, env=python_env(), timeout=120
    )
    out = r.stdout + r.stderr
    assert r.returncode == 3, out
    assert "no file larger than 64.0 KiB" in out and "ulimit -f" in out and "no room in" not in out
    assert not list(folder.iterdir())


# ---- the search for what can be deleted is bounded (issue 39) --------------------------------------
def test_the_search_for_what_can_be_deleted_looks_at_a_bounded_number_of_entries(tmp_path, monkeypatch):
    exp = tmp_path / "exp"
    (exp / ".published").mkdir(parents=True)
    for i in range(30):
        d = exp / "eval" / f"run{i}"
        d.mkdir(parents=True)
        for j in range(50):
            (d / f"step{j}.parquet").touch()
    (exp / "eval" / "run29" / ".step0.parquet.x.tmp").write_bytes(b"z" * 10)
    monkeypatch.setattr(filesystems, "DELETABLE_WALK_LIMIT", 400, raising=False)
    seen = [0]
    real = os.scandir

    class Counted:
        def __init__(self, path):
            self.it = real(path)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.it.close()

        def __iter__(self):
            for entry in self.it:
                seen[0] += 1
                yield entry

        def close(self):
            self.it.close()

    monkeypatch.setattr(os, "scandir", Counted)
    found = filesystems.deletable(exp / "scores")
    assert seen[0] <= 400 + 1  # the walk stopped at its limit (1,500 files are there)
    assert "the search stopped after" in found[-1] and str(exp) in found[-1]


# ---- write errors other than a full disk: an I/O error, a read-only file system, a folder of another user
# (issue 47): the same sentence-making as a full disk, naming the file and its file system
WRITE = (
    "import sys\n"
    "from oodcorr.core.atomic_write import write_text_atomic\n"
    "try:\n"
    "    write_text_atomic(sys.argv[1], 'x' * 100_000)\n"
    "except Exception as e:\n"
    "    print(type(e).__name__ + ': ' + str(e))\n"
    "    sys.exit(3)\n"
)


def _write(target, prefix=(), **env):
    r = subprocess.run(
        [*prefix, PYTHON, "-c", WRITE, str(target)], capture_output=True, text=True, env=python_env(**env), timeout=120
    )
    return r.returncode, r.stdout + r.stderr


def test_an_io_error_names_the_file_its_file_system_and_that_running_again_is_safe(tmp_path):
    """Before: OSError: [Errno 5] Input/output error, with a traceback."""
    shim = write_refusing_shim(tmp_path)
    folder = tmp_path / "exp"
    folder.mkdir()
    target = folder / "summary.json"
    rc, out = _write(target, LD_PRELOAD=str(shim), FAILWRITE_UNDER=str(folder), FAILWRITE_ERRNO=str(errno.EIO))
    assert rc == 3, out
    assert out.startswith("WriteFailed: "), out
    assert str(target) in out and "input/output error (EIO)" in out, out
    assert f"file system {filesystems.file_system(folder)}" in out, out  # which file system
    assert "Nothing half-written is kept" in out and "safe to run again" in out, out
    assert "no room" not in out and "quota" not in out  # not a full disk
    assert not list(folder.iterdir())  # nothing half-written


def test_a_read_only_file_system_is_named_with_its_mount(tmp_path):
    """Before: OSError: [Errno 30] Read-only file system, with a traceback."""
    ro = tmp_path / "ro"
    (ro / "exp").mkdir(parents=True)
    target = ro / "exp" / "summary.json"
    with read_only_mount(ro):
        rc, out = _write(target)
    assert rc == 3, out
    assert out.startswith("WriteFailed: "), out
    assert str(target) in out and "read-only file system" in out and f"file system {ro}" in out, out
    assert "Write to a writable file system instead" in out, out
    assert not list((ro / "exp").iterdir())


def test_a_folder_this_user_cannot_write_names_its_owner(tmp_path):
    """Before: PermissionError: [Errno 13] Permission denied, with a traceback."""
    prefix = as_nobody()
    top = Path(tempfile.mkdtemp(prefix="oodcorr-faults-"))
    try:
        top.chmod(0o755)
        folder = top / "exp"
        folder.mkdir()  # root's, 0755: nobody may not write it
        rc, out = _write(folder / "summary.json", prefix)
        assert rc == 3, out
        assert out.startswith("WriteFailed: "), out
        assert str(folder / "summary.json") in out and "cannot write in" in out, out
        assert "belongs to user root, mode 755" in out, out
        assert not list(folder.iterdir())
    finally:
        shutil.rmtree(top, ignore_errors=True)
