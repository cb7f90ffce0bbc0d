"""The room a file system has, and what stopped a write, in a sentence naming the folder and what to do."""

from __future__ import annotations

import contextlib
import errno
import fnmatch
import os
import pwd
import resource  # Unix only; the workflow runs on nothing else
import stat
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from .errors import DiskFull, WriteFailed

DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})
# the other errors a file system stops a write with
WRITE_ERRNOS = frozenset({errno.EIO, errno.EROFS, errno.EACCES, errno.EPERM})
# how libraries that lose the errno say it (safetensors' Rust IoError, pyarrow's detail text), and the
# errno each stands for; matched in lower case without spaces or underscores
_DISK_FULL_WORDS = tuple(
    (word, code)
    for code, words in (
        (errno.ENOSPC, ("nospaceleftondevice", "storagefull")),
        (errno.EDQUOT, ("diskquotaexceeded", "filesystemquotaexceeded")),
        (errno.EFBIG, ("filetoolarge",)),
    )
    for word in (*words, f"oserror{code})", f"errno{code}]")
)
# what a run leaves that can go without losing a result (the globs are searched under the experiment folder)
LEFTOVERS = (
    ("checkpoints.stale-*", "checkpoints of earlier settings, set aside, never reused"),
    (".incomplete-checkpoint-*", "damaged or unfinished checkpoints, set aside, never used"),
    (".published/kept-*", "published sets changed by hand, kept"),
    (".*.tmp", "half-written files of killed jobs"),
)
# the folder entries the search for LEFTOVERS looks at, at most: a message about a full disk must not
# wait on a walk of 10^5 files on a slow network mount
DELETABLE_WALK_LIMIT = 20_000


def _chain(exc: BaseException | None):
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def _disk_full_errno(exc: BaseException | None, folder: str | os.PathLike | None = None) -> int | None:
    """Which of ENOSPC, EDQUOT and EFBIG stopped a write (an errno of ``exc`` or its causes, or a library's
    words for it), or None. With ``folder``, torch's errno-less write error is ENOSPC when under 1 MiB is free."""
    for e in _chain(exc):
        if isinstance(e, OSError) and e.errno in DISK_FULL_ERRNOS:
            return e.errno
        text = str(e).lower().replace(" ", "").replace("_", "")
        for word, code in _DISK_FULL_WORDS:
            if word in text:
                return code
        if folder is not None and ("inlinecontainer" in text or "pytorchstreamwriter" in text):
            r = room(folder)
            if r is not None and r.free < 1 << 20:
                return errno.ENOSPC
    return None


@dataclass(frozen=True)
class Room:
    """What a file system has left for this user; ``inodes`` 0: not counted."""

    free: int
    inodes_free: int
    inodes: int
    device: int

    @property
    def no_inodes(self) -> bool:
        """Every inode is used: no file can be made, whatever the bytes free."""
        return self.inodes > 0 and self.inodes_free == 0


def _existing(folder: str | os.PathLike) -> Path:
    p = Path(folder)
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def room(folder: str | os.PathLike) -> Room | None:
    """What ``folder``'s file system (its nearest existing parent's) has left, or None if unknown."""
    where = _existing(folder)
    try:
        st, device = os.statvfs(where), os.stat(where).st_dev
    except OSError:
        return None
    return Room(st.f_bavail * st.f_frsize, st.f_favail, st.f_files, device)


def _mount_point(folder: str | os.PathLike) -> Path:
    p = _existing(folder).resolve()
    while not os.path.ismount(p):
        p = p.parent
    return p


def _experiment_folder(folder: Path) -> Path:
    for p in (folder, *folder.parents):
        if (p / "experiment.json").exists() or (p / ".published").is_dir() or (p / "experiment.lock").exists():
            return p
    return folder


def _walk(top: Path, budget: list[int], depth_first: bool, skip=lambda parent, entry: False):
    """(folder, entry) for each entry under ``top``, counted against ``budget``, not into what ``skip`` names."""
    todo = deque([top])
    while todo and budget[0] > 0:
        parent = todo.pop() if depth_first else todo.popleft()
        try:
            with os.scandir(parent) as entries:
                for entry in entries:
                    budget[0] -= 1
                    if budget[0] <= 0:
                        break
                    yield parent, entry
                    with contextlib.suppress(OSError):
                        if not skip(parent, entry) and entry.is_dir(follow_symlinks=False):
                            todo.append(Path(entry.path))
        except OSError:
            continue


def _size_of(p: Path, budget: list[int]) -> int:
    try:
        st = p.lstat()
    except OSError:
        return 0
    if not stat.S_ISDIR(st.st_mode):
        return st.st_size
    total = 0
    for _, entry in _walk(p, budget, depth_first=True):
        with contextlib.suppress(OSError):
            if not entry.is_dir(follow_symlinks=False):
                total += entry.stat(follow_symlinks=False).st_size
    return total


def _leftover(root: Path, parent: Path, name: str) -> str | None:
    for pattern, what in LEFTOVERS:
        under, _, glob = pattern.rpartition("/")
        if fnmatch.fnmatchcase(name, glob) and (not under or parent == root / under):
            return what
    return None


def deletable(folder: str | os.PathLike, limit: int = 5) -> list[str]:
    """What a run left under ``folder``'s experiment folder that holds no result (:data:`LEFTOVERS`), largest first."""
    root = _experiment_folder(Path(folder))
    budget = [DELETABLE_WALK_LIMIT]
    found: list[tuple[int, Path, str]] = []
    for parent, entry in _walk(root, budget, False, skip=lambda parent, entry: _leftover(root, parent, entry.name)):
        what = _leftover(root, parent, entry.name)
        if what:
            found.append((_size_of(Path(entry.path), budget), Path(entry.path), what))
    found.sort(key=lambda t: -t[0])
    out = [f"{p} ({human_bytes(n)}: {what})" for n, p, what in found[:limit]]
    if budget[0] <= 0:
        out.append(f"the search stopped after {DELETABLE_WALK_LIMIT:,} entries of {root}, so there may be more")
    return out


# said by every sentence of a write that stopped
KEPT = "Nothing half-written is kept, and no result is taken from it."
AGAIN = "then run again: the job starts over from what is whole"


def disk_full(
    folder: str | os.PathLike,
    what: str,
    *,
    needed: int | None = None,
    written: int | None = None,
    cause: BaseException | None = None,
) -> str:
    """The sentence for a write that does not fit: the folder, the bytes needed, the limit, what to delete."""
    folder = Path(folder)
    kind = {errno.EDQUOT: "quota", errno.EFBIG: "too large"}.get(_disk_full_errno(cause, folder))
    r = room(folder)
    free = r.free if r is not None else None
    kind = kind or ("inodes" if r is not None and r.no_inodes else "space")
    if needed is not None:
        need = f"it needs {human_bytes(needed)} ({needed} bytes)"
    elif written is not None:
        need = f"it needs more than the {human_bytes(written)} ({written} bytes) written when it stopped"
    else:
        need = "it needs more room than is free"
    leftovers = deletable(folder)
    listed = f"; what a run left that holds no result: {'; '.join(leftovers)}" if leftovers else ""
    if kind == "quota":
        return (
            f"{what}: your disk quota on the file system of {folder} is used up: {need} ({human_bytes(free)} free "
            f"there, `df -h {folder}`; `quota -s` shows your quota, on Lustre `lfs quota -h -u $USER {folder}`). "
            f"{KEPT} Delete files of yours there{listed}, ask for a larger quota, or link results/ elsewhere, {AGAIN}"
        )
    if kind == "too large":
        limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
        why = (
            f"this process may write no file larger than {human_bytes(limit)} (`ulimit -f`): raise it (`ulimit -f "
            "unlimited` where Snakemake starts)"
            if limit != resource.RLIM_INFINITY
            else f"the file system of {folder} takes no larger file (FAT32 stops at 4 GiB): link results/ elsewhere"
        )
        return f"{what}: the file is larger than allowed in {folder}: {need}, but {why}. {KEPT} Then run again"
    if kind == "inodes":
        top = _mount_point(folder)
        return (
            f"{what}: no room for another file in {folder}: its file system ({top}) has no free inodes left (`df -i "
            f"{folder}`), though {human_bytes(free)} is free. {KEPT} Delete files there, many small ones first (`du "
            f"--inodes -xs {top}/* | sort -n`){listed}, or link results/ elsewhere, {AGAIN}"
        )
    short = f" Free at least {human_bytes(needed - free)} more" if needed and free is not None else " Free room"
    delete = (
        f": delete what a run left that holds no result ({'; '.join(leftovers)}), or experiments you no longer need"
        if leftovers
        else ": delete files you no longer need there (`du -sh <folder>/* | sort -h` shows the largest)"
    )
    return (
        f"{what}: no room in {folder}: {need}, {human_bytes(free)} is free there (`df -h {folder}`). "
        f"{KEPT}{short}{delete}, or link results/ to a larger file system, {AGAIN}"
    )


def write_errno(exc: BaseException | None, folder: str | os.PathLike | None = None) -> int | None:
    """The errno that stopped a write (a full disk's, else one of :data:`WRITE_ERRNOS`), or None."""
    code = _disk_full_errno(exc, folder)
    if code is not None:
        return code
    return next((e.errno for e in _chain(exc) if isinstance(e, OSError) and e.errno in WRITE_ERRNOS), None)


def probe_write(folder: str | os.PathLike) -> int | None:
    """None if a byte can be written and synced into a new file in ``folder``, else the errno."""
    where = _existing(folder)
    name = where / f".oodcorr-probe-{os.getpid()}"
    try:
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as e:
        return e.errno
    try:
        os.write(fd, b"\0")
        os.fsync(fd)
    except OSError as e:
        return e.errno
    finally:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(name)
    return None


def file_system(folder: str | os.PathLike) -> str:
    """``folder``'s file system for a sentence: its mount point and type (``/scratch (nfs4)``)."""
    where = _existing(folder).resolve()
    best: tuple[str, str] | None = None
    with contextlib.suppress(OSError):
        with open("/proc/self/mounts", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                fields = line.split()
                if len(fields) < 3:
                    continue
                top = fields[1].replace("\\040", " ")
                inside = where == Path(top) or Path(top) in where.parents
                if inside and (best is None or len(top) >= len(best[0])):  # the last mount on a point is seen
                    best = (top, fields[2])
    return f"{best[0]} ({best[1]})" if best else str(_mount_point(folder))


def owner_of(path: str | os.PathLike) -> str:
    """Who owns ``path`` (its nearest visible parent) and its mode, for a refusal; "" when unknown."""
    path = Path(path)
    for p in (path, *path.parents):
        try:
            st = p.stat()
        except OSError:
            continue
        try:
            name = pwd.getpwuid(st.st_uid).pw_name
        except KeyError:
            name = f"uid {st.st_uid}"
        mine = "you" if st.st_uid == os.getuid() else f"user {name}"
        return f"{p} belongs to {mine}, mode {stat.S_IMODE(st.st_mode):o}"
    return ""


def write_failed(
    folder: str | os.PathLike,
    what: str,
    *,
    needed: int | None = None,
    written: int | None = None,
    cause: BaseException | None = None,
    code: int | None = None,
) -> WriteFailed:
    """:class:`DiskFull` or :class:`WriteFailed` for a write of ``what`` into ``folder`` that the file system
    stopped. ``code``: the errno when ``cause`` lacks it (:func:`probe_write`)."""
    folder = Path(folder)
    code = code if code is not None else write_errno(cause, folder)
    if code in DISK_FULL_ERRNOS:
        return DiskFull(disk_full(folder, what, needed=needed, written=written, cause=cause))
    fs = file_system(folder)
    library = cause is not None and not isinstance(cause, OSError)  # a library's words: said as they are
    said = f" ({type(cause).__name__}: {str(cause)[:200]})" if library else ""
    if code == errno.EROFS:
        return WriteFailed(
            f"{what}: {folder} is on a read-only file system (file system {fs}){said}. {KEPT} Write to a writable "
            f"file system instead (the workflow: link results/ to one; `oodcorr analyse`: another --out), or have it "
            f"mounted read-write, {AGAIN}"
        )
    if code in (errno.EACCES, errno.EPERM):
        owner = owner_of(folder)
        return WriteFailed(
            f"{what}: this user cannot write in {folder} ({os.strerror(code)}"
            + (f": {owner}" if owner else "")
            + f"){said}. {KEPT} Make it writable (`ls -ld {folder}`; `chmod u+w {folder}` if it is yours), run as "
            "its owner, or write to a folder of yours (the workflow: link results/ to one; `oodcorr analyse`: "
            f"another --out), {AGAIN}"
        )
    kind = "an input/output error (EIO)" if code == errno.EIO else (os.strerror(code) if code else "an error")
    return WriteFailed(
        f"{what}: the write into {folder} failed with {kind} of its file system (file system {fs}){said}. "
        f"{KEPT} It is safe to run again. If it fails again, see `dmesg | tail` or ask the administrators about "
        f"{fs}, and meanwhile link results/ to another file system"
    )


def check_room(folder: str | os.PathLike, needed: int, what: str) -> None:
    r = room(folder)
    if r is not None and (needed > r.free or r.no_inodes):
        raise DiskFull(disk_full(folder, what, needed=needed))


def human_bytes(n: float | None) -> str:
    if n is None:
        return "unknown"
    for unit, f in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= f:
            return f"{n / f:.1f} {unit}"
    return f"{int(n)} B"
