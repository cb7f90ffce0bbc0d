"""One writer per folder: an exclusive ``flock`` that the kernel releases when its holder dies.

Snakemake's lock keeps out a second Snakemake of the same working folder only, and a killed run
leaves it behind; these locks live in the folder they guard, so every checkout shares them and they
never go stale. Where the file system refuses ``flock``, :data:`LOCK_DIR_ENV` moves them to a local
folder, each place recorded (``.lock-places/``).
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import fcntl
import json
import os
import socket
import stat
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from .atomic_write import write_json_atomic
from .digests import short_tag
from .filesystems import owner_of
from .io import json_or_none

LOCK_DIR_ENV = "OODCORR_LOCK_DIR"  # a folder on a local disk where the locks are taken (flock refused)
PLACES = ".lock-places"  # in the guarded folder: where its lock was taken
LOCK_FILE = "finetune.lock"
# what flock says on a file system that has no locks (not: another process holds it)
REFUSED_ERRNOS = frozenset({errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL})


@dataclass(frozen=True)
class LockKind:
    file: str  # the lock file's name in the folder it guards
    folder: str  # what the folder is, for the message ("run folder")
    holder: str  # who holds it ("another finetune")
    why: str  # why two at once are refused (a sentence)
    recorded: bool = False  # each place it is taken in is recorded, and taken by every run (.lock-places)


FINETUNE = LockKind(
    LOCK_FILE,
    "run folder",
    "another finetune",
    "Two finetunes in one run folder would overwrite each other's checkpoints",
)
EXPERIMENT = LockKind(
    "experiment.lock",
    "experiment folder",
    "another run of the workflow (or `oodcorr analyse --force`)",
    "Two writers in one experiment folder would mix their results and publish over each other",
    recorded=True,
)
PUBLISH = LockKind(
    "publish.lock", "published folder", "another publish", "Two publishes at once would switch the set under each other"
)


class FolderInUse(RuntimeError):
    """Another process holds the folder's lock; the message names it and what to do."""


class LocksRefused(FolderInUse):
    """The file system refuses ``flock``; the message says how to lock elsewhere (:data:`LOCK_DIR_ENV`)."""


class FolderNotWritable(FolderInUse):
    """The folder (or its lock file) cannot be written by this user; the message names the owner."""


class LockDirUnusable(FolderInUse):
    """The lock folder (:data:`LOCK_DIR_ENV`) cannot hold the lock; the message names the variable."""


class UnsafeLockFile(FolderInUse):
    """A lock path that is not a regular file of its own (a link, a folder, a hard link)."""


@dataclass
class HeldLock:
    path: Path
    fd: int
    others: tuple[int, ...] = ()  # the lock held in the other places recorded for the folder (.lock-places)


_HELD: dict[str, HeldLock] = {}  # lock path -> the lock this process holds (re-entrant)


def local_holders(fd: int) -> list[int]:
    """The PIDs on this host that hold an ``flock`` on the file open as ``fd`` (``/proc/locks``)."""
    try:
        st = os.fstat(fd)
        with open("/proc/locks", encoding="ascii", errors="replace") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return []
    want = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    out = []
    for line in lines:
        fields = line.split()
        # "1: FLOCK  ADVISORY  WRITE 1234 fe:00:5678 0 EOF"; a waiter's line has "->" after the number
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5] == want and fields[4].isdigit():
            out.append(int(fields[4]))
    return sorted(set(out) - {os.getpid()})


def _refusal(folder: Path, path: Path, info: dict | None, local: list[int], kind: LockKind) -> str:
    head = f"{kind.folder} {folder} is in use by {kind.holder} (it holds {path})"
    here = socket.gethostname()
    named_here = info is not None and info.get("host") == here
    if local and not (named_here and str(info.get("pid")) in map(str, local)):
        # a live process of this host holds it, whatever the file says (it names an earlier holder,
        # another host or container name, or nobody)
        pids = ", ".join(map(str, local))
        said = (
            f"; the lock file names PID {info['pid']} on host {info.get('host', '?')}, started "
            f"{info.get('started', '?')}, which wrote it last"
            if info is not None
            else "; the holder has not named itself in the lock file"
        )
        return (
            f"{head}: the lock is held by a live process on this host ({here}): PID {pids}, per /proc/locks"
            f"{said}. See what it is with `ps -o pid,etime,args -p {local[0]}` (or `fuser -v {path}`); stop it "
            f"(`kill {local[0]}`) or wait for it to finish, then run again: the lock goes with the process, "
            "there is nothing to delete"
        )
    if info is None:
        return f"{head}; the holder has not named itself. Wait for it or find it (`fuser -v {path}`), then run again"
    who = f"PID {info['pid']} on host {info.get('host', '?')}, started {info.get('started', '?')}"
    if info.get("slurm_job_id"):
        who += f", SLURM job {info['slurm_job_id']}"
    if info.get("config"):
        who += f", config {info['config']}"
    if not named_here and not local:
        job = f" (or `scancel {info['slurm_job_id']}`)" if info.get("slurm_job_id") else ""
        return (
            f"{head}: {who}. No process on this host ({here}) holds the lock, so it is held from another "
            f"host, the one the file names as far as it knows. On {info.get('host', '?')}, see it with "
            f"`ps -o pid,etime,args -p {info['pid']}`, then stop it (`kill {info['pid']}`{job}) or wait for "
            "it to finish, and run again: the lock goes with the process, there is nothing to delete"
        )
    try:
        os.kill(int(info["pid"]), 0)
    except ProcessLookupError:
        return (
            f"{head}: {who}, which has exited, but a process it started still holds the lock "
            f"(`fuser -v {path}` shows it). Stop that process or wait for it, then run again"
        )
    except (PermissionError, ValueError, TypeError):
        pass  # alive, another user's, or a PID that cannot be asked about
    return (
        f"{head}: {who}. {kind.why}. Wait for it, or stop it (`kill {info['pid']}` on {info.get('host', '?')}), "
        "then run again: the lock goes with the process, there is nothing to delete"
    )


def open_lock_file(path: str | os.PathLike) -> int:
    """A lock file opened read-write, created if missing; anything but a regular file with one name is
    :class:`UnsafeLockFile`, since the holder's details are written into it."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
    except OSError as e:
        if e.errno == errno.ELOOP or path.is_symlink():
            try:
                target = os.readlink(path)
            except OSError:
                target = "?"
            raise UnsafeLockFile(
                f"{path} is a symbolic link (to {target}), where a lock file belongs: writing the "
                f"holder's details into it would overwrite what it points to. Remove the link (`rm {path}`; "
                "the file it points to is untouched) and run again"
            ) from None
        if e.errno == errno.EISDIR:
            raise UnsafeLockFile(f"{path} is a folder, where a lock file belongs; move it away and run again") from None
        raise
    st = os.fstat(fd)
    problem = None
    if not stat.S_ISREG(st.st_mode):
        problem = "is not a regular file"
    elif st.st_nlink > 1:
        problem = f"has {st.st_nlink} names (hard links), so writing to it would change another file too"
    if problem:
        os.close(fd)
        raise UnsafeLockFile(
            f"{path} {problem}, where a lock file belongs; move it away (`mv {path} {path}.not-a-lock`) and run again"
        )
    os.set_blocking(fd, True)
    return fd


def lock_path(folder: str | os.PathLike, kind: LockKind) -> Path:
    """Where ``folder``'s lock of ``kind`` is taken: in the folder, or in :data:`LOCK_DIR_ENV`."""
    return _lock_in(folder, kind, _lock_dir())


def _lock_in(folder: str | os.PathLike, kind: LockKind, lock_dir: str | None) -> Path:
    resolved = Path(folder).resolve()
    if not lock_dir:
        return resolved / kind.file
    return Path(lock_dir) / f"{resolved.name}-{short_tag(str(resolved), 16)}-{kind.file}"


def _why_not_writable(folder: Path, e: OSError, owned: Path) -> str:
    """Why ``folder`` cannot be written: a read-only file system, else who owns ``owned`` (or nothing known)."""
    if e.errno == errno.EROFS:
        return f"{folder} is on a read-only file system"
    return owner_of(owned) or f"{folder} is not writable"


def _drop_copied_name(path: Path) -> None:
    """A lock file with another name too (its folder copied with ``cp -al``) that no run holds: this
    name of it goes, so the lock is made anew here. One held is left, and :func:`open_lock_file` refuses it."""
    with contextlib.suppress(OSError):
        st = os.lstat(path)
        if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                if os.path.samestat(os.fstat(fd), os.lstat(path)):
                    path.unlink()
            finally:
                os.close(fd)


def _open(folder: Path, kind: LockKind) -> tuple[Path, int]:
    path = lock_path(folder, kind)
    _drop_copied_name(path)
    elsewhere = path.parent != folder.resolve()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        if elsewhere:  # locked elsewhere: the folder itself must still be writable
            fd, probe = tempfile.mkstemp(prefix=".oodcorr-writable-", dir=folder)
            os.close(fd)
            os.unlink(probe)
        else:
            return path, open_lock_file(path)
    except OSError as e:
        if e.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
            raise
        raise FolderNotWritable(
            f"{kind.folder} {folder} cannot be written by this user ({e.strerror or e}: "
            f"{_why_not_writable(folder, e, path)}), so its lock ({path}) cannot be taken. Run with a results/ you "
            "can write (a link to a folder of yours), or ask the folder's owner to run it or give your group write "
            "access"
        ) from None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        return path, open_lock_file(path)
    except OSError as e:
        if e.errno not in (errno.EACCES, errno.EPERM, errno.EROFS, errno.EEXIST, errno.ENOTDIR):
            raise
        where = path.parent
        blocker = next((p for p in (where, *where.parents) if p.exists() and not p.is_dir()), None)
        why = f"{blocker} is a file, not a folder" if blocker is not None else _why_not_writable(where, e, where)
        raise LockDirUnusable(
            f"{kind.folder} {folder}: its lock cannot be taken in the lock folder {LOCK_DIR_ENV}="
            f"{os.environ.get(LOCK_DIR_ENV)} ({e.strerror or e}: {why}). Set {LOCK_DIR_ENV} to a folder of yours on "
            f"a local disk (`export {LOCK_DIR_ENV}=/tmp/$USER/oodcorr-locks`), the same for every run, or unset it, "
            "and run again"
        ) from None


@contextlib.contextmanager
def hold(folder: str | os.PathLike, kind: LockKind = FINETUNE, extra: dict | None = None) -> Iterator[HeldLock]:
    """Hold ``folder``'s lock for the ``with`` block (re-entrant); ``extra`` is added to the holder's details."""
    taken_here = str(lock_path(folder, kind)) not in _HELD
    held = acquire(folder, kind, extra)
    try:
        yield held
    finally:
        if taken_here:
            release(held)


def _take(folder: Path, kind: LockKind, extra: dict | None) -> HeldLock:
    path, fd = _open(folder, kind)
    others: list[int] = []
    try:
        if kind.recorded:
            others = _take_every_place(folder, kind, path, fd)
        else:
            _flock(fd, folder, path, kind)
    except BaseException:
        os.close(fd)
        raise
    info = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "started": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
    }
    if os.environ.get("SLURM_JOB_ID"):
        info["slurm_job_id"] = os.environ["SLURM_JOB_ID"]
    data = json.dumps(dict(extra or {}, **info)).encode("utf-8")
    for f in (fd, *others):  # each place names its holder, for a run that meets it there
        os.ftruncate(f, 0)
        os.pwrite(f, data, 0)
    held = _HELD[str(path)] = HeldLock(path, fd, others=tuple(others))
    return held


def _flock(fd: int, folder: Path, path: Path, kind: LockKind, note: str = "") -> None:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        for _ in range(20):  # the holder writes its details just after taking the lock: give it a moment
            with contextlib.suppress(ValueError, OSError):
                info = json.loads(os.pread(fd, 4096, 0).decode("utf-8"))
                if isinstance(info, dict) and "pid" in info:
                    break
            time.sleep(0.05)
        else:
            info = None
        raise FolderInUse(_refusal(folder, path, info, local_holders(fd), kind) + note) from None
    except OSError as e:
        if e.errno not in REFUSED_ERRNOS:
            raise
        here = os.environ.get(LOCK_DIR_ENV)
        if here:
            raise LocksRefused(
                f"{kind.folder} {folder}: the lock folder {here} ({LOCK_DIR_ENV}) refuses locks too (flock on {path}: "
                f"{e.strerror or e}); set {LOCK_DIR_ENV} to a folder on a local disk of this host (e.g. /tmp/$USER/"
                "oodcorr-locks) and run again"
            ) from None
        raise LocksRefused(
            f"{kind.folder} {folder}: its file system refuses locks (flock on {path}: {e.strerror or e}), and nothing "
            f"is written there without one ({kind.why}). Set {LOCK_DIR_ENV} to a folder on a local disk, the same for "
            f"every run of this experiment (`export {LOCK_DIR_ENV}=/tmp/$USER/oodcorr-locks`), and run again: it "
            "keeps out a second writer on this host only, so start every run from this host. Or mount it with locking"
        ) from None


def _take_every_place(folder: Path, kind: LockKind, own: Path, fd: int) -> list[int]:
    """Take the lock in this run's place (``own``) and in every other recorded place, in path order;
    return the other places' descriptors. Recording before listing makes the first place both want decide."""
    where = _lock_dir()
    record = folder.resolve() / PLACES / f"{kind.file}-{short_tag(str(where), 16)}.json"
    doc = {"lock_dir": where, "host": socket.gethostname()}
    if json_or_none(record) != doc:
        write_json_atomic(record, doc)
    places, damaged = _recorded(folder, kind.file)
    if damaged:
        raise FolderInUse(damaged[0])
    others = {str(_lock_in(folder, kind, p.lock_dir)): p for p in places}
    others.pop(str(own), None)
    held: list[int] = []
    try:
        for name in sorted([str(own), *others]):
            if name == str(own):
                _flock(fd, folder, own, kind)
                continue
            other, path = others[name], Path(name)
            here, there = _describe(where), _describe(other.lock_dir)
            if other.lock_dir is not None and other.host != socket.gethostname():
                raise FolderInUse(
                    f"{kind.folder} {folder}: its lock has been taken in the lock folder of host {other.host} "
                    f"({there} there), this run on {socket.gethostname()} would take it in {here}: whether a run on "
                    f"{other.host} holds it cannot be told from here. Run this experiment from {other.host} with the "
                    f"same {LOCK_DIR_ENV}; or, once no run of it is alive there, delete {other.record} and run again"
                )
            try:  # made if missing: a run about to take it there meets this one's lock
                path.parent.mkdir(parents=True, exist_ok=True)
                ofd = open_lock_file(path)
            except OSError:
                continue  # this user cannot make it there: nor can a run of this user hold it
            held.append(ofd)
            note = (
                f". That run takes the lock in {there}, this one in {here}: every run must take it in one place, so "
                f"set {LOCK_DIR_ENV} alike in every shell (or in none); the places used are recorded in "
                f"{other.record.parent}"
            )
            try:
                _flock(ofd, folder, path, kind, note)
            except LocksRefused:
                os.close(held.pop())  # a file system without locks: no run holds it there
    except BaseException:
        for f in held:
            os.close(f)
        raise
    return held


def release(held: HeldLock) -> None:
    _HELD.pop(str(held.path), None)
    for fd in (*held.others, held.fd):
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)  # a clean release leaves no name behind for the next contender to misread
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


def acquire(folder: str | os.PathLike, kind: LockKind, extra: dict | None = None) -> HeldLock:
    """Take ``folder``'s lock until :func:`release` or the process ends; :class:`FolderInUse` if another has it."""
    held = _HELD.get(str(lock_path(folder, kind)))
    return held if held is not None else _take(Path(folder), kind, extra)


def check_free(folder: str | os.PathLike, kind: LockKind = FINETUNE) -> None:
    """Raise :class:`FolderInUse` if another process holds ``folder``'s lock; creates nothing."""
    lock = lock_path(folder, kind)
    if str(lock) in _HELD or not (lock.exists() or lock.is_symlink()):
        return
    with hold(folder, kind):
        pass


# ---- where an experiment's lock is taken, recorded in the experiment folder (.lock-places/) -----------
# With LOCK_DIR_ENV set the lock is taken in that folder; two shells that disagree about the variable
# would each hold a lock of their own. So a run takes the lock in every recorded place (_take_every_place).
@dataclass(frozen=True)
class _Place:
    lock_dir: str | None  # None: the folder itself
    host: str
    record: Path


def _lock_dir() -> str | None:
    elsewhere = os.environ.get(LOCK_DIR_ENV)
    return str(Path(elsewhere).expanduser().resolve()) if elsewhere else None


def _recorded(folder: Path, kind_file: str) -> tuple[list[_Place], list[str]]:
    """The recorded places of ``folder``'s lock, and a sentence for each unreadable record."""
    places, damaged = [], []
    where = folder.resolve() / PLACES
    try:
        names = sorted(n for n in os.listdir(where) if n.startswith(f"{kind_file}-") and n.endswith(".json"))
    except OSError:
        return [], []
    for name in names:
        path = where / name
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
            place = _Place(doc["lock_dir"], str(doc["host"]), path)
            if place.lock_dir is not None and not isinstance(place.lock_dir, str):
                raise TypeError("lock_dir")
            places.append(place)
        except (OSError, ValueError, KeyError, TypeError) as e:
            damaged.append(
                f"{path}, the record of a place where the lock of {folder} was taken, is unreadable "
                f"({type(e).__name__}); delete it and run again: the run records its place again"
            )
    return places, damaged


def _describe(where: str | None) -> str:
    return f"the folder itself ({LOCK_DIR_ENV} unset)" if where is None else f"{LOCK_DIR_ENV}={where}"
