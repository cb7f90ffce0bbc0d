"""Where an experiment's lock is taken, recorded in the experiment folder (``.lock-places/``).

With ``OODCORR_LOCK_DIR`` set the lock is taken in that folder; two shells that disagree about the
variable would each hold a lock of their own. So every place used is recorded, and a run takes the
lock in every recorded place (:func:`oodcorr.core.locks.hold`).
"""

from __future__ import annotations

import errno
import json
import os
import socket
from dataclasses import dataclass
from pathlib import Path

from .atomic_write import write_json_atomic
from .digests import short_tag
from .filesystems import owner_of

PLACES = ".lock-places"  # in the guarded folder
LOCK_DIR_ENV = "OODCORR_LOCK_DIR"  # as oodcorr.core.locks names it


@dataclass(frozen=True)
class Place:
    lock_dir: str | None  # None: the folder itself
    host: str
    record: Path


def lock_dir() -> str | None:
    elsewhere = os.environ.get(LOCK_DIR_ENV)
    return str(Path(elsewhere).expanduser().resolve()) if elsewhere else None


def _record_path(folder: Path, kind_file: str, where: str | None) -> Path:
    return folder.resolve() / PLACES / f"{kind_file}-{short_tag(str(where), 16)}.json"


def record(folder: Path, kind_file: str) -> None:
    """Record that ``folder``'s lock of ``kind_file`` is taken in this process's place by this host."""
    where = lock_dir()
    path = _record_path(folder, kind_file, where)
    doc = {"lock_dir": where, "host": socket.gethostname()}
    try:
        if json.loads(path.read_text(encoding="utf-8")) == doc:
            return
    except (OSError, ValueError):
        pass
    write_json_atomic(path, doc)


def recorded(folder: Path, kind_file: str) -> tuple[list[Place], list[str]]:
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
            place = Place(doc["lock_dir"], str(doc["host"]), path)
            if place.lock_dir is not None and not isinstance(place.lock_dir, str):
                raise TypeError("lock_dir")
            places.append(place)
        except (OSError, ValueError, KeyError, TypeError) as e:
            damaged.append(
                f"{path}, the record of a place where the lock of {folder} was taken, is unreadable "
                f"({type(e).__name__}); delete it and run again: the run records its place again"
            )
    return places, damaged


def describe(where: str | None) -> str:
    return f"the folder itself ({LOCK_DIR_ENV} unset)" if where is None else f"{LOCK_DIR_ENV}={where}"


def elsewhere(other: Place) -> str:
    """What to add to the refusal when the lock is held in another place than this run's."""
    return (
        f". That run takes the lock in {describe(other.lock_dir)}, this one in {describe(lock_dir())}: a lock "
        f"keeps out a second writer only where every run takes it in one place, so set {LOCK_DIR_ENV} alike in "
        "every shell that runs this experiment (or in none); the places used are recorded in "
        f"{other.record.parent}"
    )


def unprovable(kind_folder: str, folder: Path, other: Place) -> str:
    """The refusal when a recorded place is a lock folder of another host."""
    here = socket.gethostname()
    return (
        f"{kind_folder} {folder}: its lock has been taken in the lock folder of host {other.host} "
        f"({describe(other.lock_dir)} there); this run, on {here}, would take it in {describe(lock_dir())}. A "
        f"lock folder keeps out a second writer on its own host only, so whether a run on {other.host} holds it "
        f"cannot be told from here. Run this experiment from {other.host} with the same {LOCK_DIR_ENV}; or, once "
        f"no run of it is alive on {other.host}, delete {other.record} (the record of that place) and run again"
    )


def unusable(what: str, where: Path, e: OSError) -> str:
    """The refusal when the lock folder ``where`` cannot hold ``what``'s lock."""
    blocker = next((p for p in (where, *where.parents) if p.exists() and not p.is_dir()), None)
    if blocker is not None:
        why = f"{blocker} is a file, not a folder"
    elif e.errno == errno.EROFS:
        why = f"{where} is on a read-only file system"
    else:
        why = owner_of(where) or f"{where} is not writable"
    return (
        f"{what}: its lock cannot be taken in the lock folder {LOCK_DIR_ENV}={os.environ.get(LOCK_DIR_ENV)} "
        f"({e.strerror or e}: {why}), so nothing is written. Set {LOCK_DIR_ENV} to a folder of yours on a local "
        f"disk of this host (`export {LOCK_DIR_ENV}=/tmp/$USER/oodcorr-locks`; it is made if missing), the same "
        "for every run of this experiment, or unset it to take the lock in the folder itself, and run again"
    )
