"""Real faults for the fault tests (imported as ``from faults import ...``): a small file system that
fills up (ENOSPC) or runs out of inodes, a read-only one (EROFS), a file system that refuses ``flock``
and one whose writes fail with a quota, size or I/O error (LD_PRELOAD shims), a writer that is
another user (root bypasses file modes), and a child process stopped at a point it names, for real
SIGTERM -> SIGKILL sequences.

Each skips with its reason where the fault cannot be made here (not root, no ``mount``, no C
compiler); none fakes the fault in Python.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PYTHON = sys.executable


@contextlib.contextmanager
def small_filesystem(where: Path, size: str = "1m", inodes: int | None = None) -> Iterator[Path]:
    """A tmpfs of ``size`` (and, given, of ``inodes`` inodes: files and folders) mounted on ``where``
    (made if missing) for the ``with`` block: writes past its size, or a file past its inodes, fail
    with ENOSPC, as on a full scratch disk. Skips unless this process may mount."""
    where.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("a full disk is made with a small tmpfs, which needs root and mount(8)")
    options = f"size={size}" + (f",nr_inodes={inodes}" if inodes else "")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({r.stderr.strip()}), so no real ENOSPC can be made")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


@contextlib.contextmanager
def read_only_mount(folder: Path) -> Iterator[Path]:
    """``folder`` bind-mounted onto itself read-only for the ``with`` block: every write under it fails
    with EROFS, as on a file system mounted read-only. Skips unless this process may mount."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("a read-only file system is made with a read-only bind mount, which needs root and mount(8)")
    r = subprocess.run(["mount", "--bind", str(folder), str(folder)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot bind-mount here ({r.stderr.strip()}), so no read-only file system can be made")
    try:
        r = subprocess.run(["mount", "-o", "remount,ro,bind", str(folder)], capture_output=True, text=True)
        if r.returncode != 0:
            pytest.skip(f"cannot remount read-only ({r.stderr.strip()})")
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True)


def use_up_inodes(folder: Path) -> int:
    """Make empty files in ``folder`` until its file system has no inode left (its bytes stay free);
    returns how many were made."""
    n = 0
    while True:
        try:
            (folder / f".inode-{n}").touch()
        except OSError as e:
            assert e.errno == errno.ENOSPC, e
            return n
        n += 1
        assert n < 100_000, "the file system does not run out of inodes"


def fill(folder: Path, leave: int = 0) -> None:
    """Fill ``folder``'s file system until at most ``leave`` bytes are free."""
    st = os.statvfs(folder)
    free = st.f_bavail * st.f_frsize
    with open(folder / ".filler", "wb") as fh:
        with contextlib.suppress(OSError):
            fh.write(b"\0" * max(0, free - leave))


_SHIM = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>
/* flock as on an NFS mount without a lock manager: refused (ENOLCK) for files under $NOFLOCK_UNDER */
int flock(int fd, int op) {
    static int (*real)(int, int) = 0;
    if (!real) real = (int (*)(int, int))dlsym(RTLD_NEXT, "flock");
    const char *under = getenv("NOFLOCK_UNDER");
    char link[64], path[4096];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof path - 1);
    if (under && n > 0) {
        path[n] = 0;
        if (strncmp(path, under, strlen(under)) == 0) { errno = ENOLCK; return -1; }
    }
    return real(fd, op);
}
"""


_WRITE_SHIM = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
/* write as on a file system that refuses it: fails with errno $FAILWRITE_ERRNO for files under
   $FAILWRITE_UNDER (a used-up quota: EDQUOT; a file over the size limit: EFBIG; a failing disk: EIO) */
ssize_t write(int fd, const void *buf, size_t count) {
    static ssize_t (*real)(int, const void *, size_t) = 0;
    if (!real) real = (ssize_t (*)(int, const void *, size_t))dlsym(RTLD_NEXT, "write");
    const char *under = getenv("FAILWRITE_UNDER"), *code = getenv("FAILWRITE_ERRNO");
    char link[64], path[4096];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof path - 1);
    if (under && code && n > 0) {
        path[n] = 0;
        if (strncmp(path, under, strlen(under)) == 0) { errno = atoi(code); return -1; }
    }
    return real(fd, buf, count);
}
"""


def _build_shim(tmp: Path, name: str, source: str, what: str) -> Path:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip(f"no C compiler (cc) to build the LD_PRELOAD shim that makes {what}")
    src, lib = tmp / f"{name}.c", tmp / f"{name}.so"
    src.write_text(source)
    r = subprocess.run([cc, "-shared", "-fPIC", "-o", str(lib), str(src), "-ldl"], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot build the LD_PRELOAD shim: {r.stderr.strip()[:300]}")
    return lib


def flock_refusing_shim(tmp: Path) -> Path:
    """A shared library that, preloaded (``LD_PRELOAD``), makes ``flock`` fail with ENOLCK on every file
    under ``$NOFLOCK_UNDER``, as on an NFS mount without locking (elsewhere flock works). Compiled now
    with ``cc``; skips without a compiler."""
    return _build_shim(tmp, "noflock", _SHIM, "flock fail")


def write_refusing_shim(tmp: Path) -> Path:
    """A shared library that, preloaded (``LD_PRELOAD``), makes ``write`` fail with the errno
    ``$FAILWRITE_ERRNO`` on every file under ``$FAILWRITE_UNDER`` (elsewhere writes work): a used-up
    quota (EDQUOT) or a file over the size limit (EFBIG) without a quota system or a huge file, or a
    failing disk (EIO) without one.
    Compiled now with ``cc``; skips without a compiler."""
    return _build_shim(tmp, "failwrite", _WRITE_SHIM, "writes fail")


def as_nobody() -> list[str]:
    """The command prefix that runs a child as user ``nobody`` (root bypasses file modes, so a
    read-only or foreign folder is only real for another user). Skips unless root with setpriv."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("a folder that is not the writer's own needs the writer to be another user (root + setpriv)")
    return ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"]


def python_env(**extra: str) -> dict:
    """The environment for a child ``python``: this checkout's src first."""
    src = str(REPO / "src")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")]), **extra}


def start_stopped(script: str, *args: str) -> subprocess.Popen:
    """A child ``python -c script args...`` (this checkout's src first), its output kept for the
    message when it dies early: for a child that writes a file at the point it stops and blocks
    there until signalled (:func:`wait_for`, :func:`preempt`)."""
    return subprocess.Popen(
        [PYTHON, "-c", script, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=python_env()
    )


def wait_for(path: Path, proc: subprocess.Popen, timeout: float = 300) -> None:
    """Wait until the child has written ``path`` (it says it reached a point), failing at once if it
    died first; bounded by ``timeout`` (a hung child is a failure, not a hang)."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None:
            out = proc.stdout.read() if proc.stdout else ""
            raise AssertionError(f"the child ended ({proc.returncode}) before it reached {path.name}: {out[-3000:]}")
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"the child did not reach {path.name} in {timeout} s")
        time.sleep(0.02)


def preempt(proc: subprocess.Popen, grace: float = 2.0) -> int:
    """What SLURM does at a preemption: SIGTERM, then SIGKILL once the grace time is over; return the
    child's exit status (negative: the signal that ended it)."""
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGKILL)
        return proc.wait(timeout=60)
