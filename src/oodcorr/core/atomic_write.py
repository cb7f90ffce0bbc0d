"""Every result file is written through atomic_path (a temporary file beside it, then a rename), so a
killed job never leaves a truncated file behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from .digests import json_default
from .errors import WriteFailed
from .filesystems import DISK_FULL_ERRNOS, check_room, write_errno, write_failed


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, size: int | None = None, what: str | None = None) -> Iterator[Path]:
    """Yield a temporary path beside ``path``, renamed onto it on success, removed on any exception; a
    write the file system stops is a :class:`~oodcorr.core.errors.WriteFailed` (with ``size``, checked first)."""
    path = Path(path)
    what = what or str(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if size is not None:
            check_room(path.parent, size, what)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as e:
        if write_errno(e) is None:  # no room for an inode (ENOSPC), read-only, another user's folder
            raise
        raise write_failed(path.parent, what, needed=size, cause=e) from e
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        # mkstemp makes the file private (0600); results get the usual umask-based mode
        with contextlib.suppress(FileNotFoundError):
            os.chmod(tmp_path, 0o666 & ~current_umask())
        os.replace(tmp_path, path)
    except BaseException as e:
        written = None
        with contextlib.suppress(OSError):
            written = tmp_path.stat().st_size
        # the file system stopping this write (a full disk, or an error naming no file elsewhere), not, say,
        # an input that cannot be read
        code = write_errno(e, tmp_path.parent) if isinstance(e, Exception) and not isinstance(e, WriteFailed) else None
        named = [getattr(x, "filename", None) for x in (e, e.__cause__, e.__context__) if isinstance(x, OSError)]
        failed = code in DISK_FULL_ERRNOS or (
            code is not None
            and not any(n and Path(n).parent not in (tmp_path.parent, tmp_path.parent.resolve()) for n in named)
        )
        with contextlib.suppress(FileNotFoundError):
            tmp_path.unlink()
        if failed:
            raise write_failed(path.parent, what, needed=size, written=written, cause=e) from e
        raise


def current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def follow_umask(folder: str | os.PathLike) -> None:
    """Give every regular file under ``folder`` the mode the umask gives a new file (safetensors leaves
    0600). Call it before hashing: a chmod changes the ctime :func:`stat_key` records."""
    want = 0o666 & ~current_umask()
    for f in sorted(Path(folder).rglob("*")):
        st = f.lstat()
        if stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) != want:
            os.chmod(f, want)


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    data = text.encode("utf-8")
    with atomic_path(path, size=len(data)) as tmp:
        tmp.write_bytes(data)


def write_json_atomic(path: str | os.PathLike, obj: Any) -> None:
    write_text_atomic(path, json.dumps(obj, indent=2, sort_keys=True, default=json_default) + "\n")


def write_jsonl_atomic(path: str | os.PathLike, records: Iterable[dict]) -> int:
    n = 0
    with atomic_path(path) as tmp:
        with open(tmp, "w", encoding="utf-8") as fh:
            for rec in records:
                fh.write(json.dumps(rec, ensure_ascii=False, sort_keys=True) + "\n")
                n += 1
    return n
