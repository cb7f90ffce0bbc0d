"""A job's refusal, ``logs/.refused/<job>.json``: the sentence it stopped with, repeated on the console
when the run ends.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

from .digests import short_tag

REFUSALS_ENV = "OODCORR_REFUSALS"  # the folder of this run's refusal records, set by the Snakefile for its jobs
REFUSAL_BYTES = 16384  # a record's room, taken when the job starts: a full disk cannot stop it being written


def refusals_dir(logs: str | os.PathLike) -> Path:
    return Path(logs) / ".refused"


class RefusalSlot:
    """One job's refusal record, its room taken when the job starts: :meth:`fill` it with the sentence the
    job stops with, or :meth:`drop` it. ``killed``: what it holds meanwhile. Nothing here raises."""

    def __init__(self, folder: str | os.PathLike, log: str, killed: dict | None = None):
        self.path = Path(folder) / f"{short_tag(log, 20)}.json"
        self.fd: int | None = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
            try:
                os.posix_fallocate(self.fd, 0, REFUSAL_BYTES)
            except OSError:  # a file system without fallocate: the room taken by writing it
                os.pwrite(self.fd, b"\0" * REFUSAL_BYTES, 0)
            if killed:
                os.pwrite(self.fd, json.dumps(killed, ensure_ascii=True).encode("ascii")[: REFUSAL_BYTES // 2], 0)
        except OSError:
            self.drop()

    def fill(self, doc: dict) -> bool:
        """Write ``doc`` (its ``message`` shortened to fit) into the room taken; whether it was written."""
        if self.fd is None:
            return False
        doc = dict(doc, message=str(doc.get("message", ""))[: REFUSAL_BYTES // 2])
        data = json.dumps(doc, ensure_ascii=True).encode("ascii")[:REFUSAL_BYTES]
        try:
            os.pwrite(self.fd, data, 0)
            os.ftruncate(self.fd, len(data))
            os.close(self.fd)
        except OSError:
            return False
        finally:
            self.fd = None
        return True

    def drop(self) -> None:
        """The job ended well (or no slot could be made): no record."""
        if self.fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = None
        with contextlib.suppress(OSError):
            self.path.unlink()


def read_refusals(folder: str | os.PathLike) -> list[dict]:
    out = []
    try:
        paths = sorted(Path(folder).glob("*.json"))
    except OSError:
        return []
    for p in paths[:10_000]:
        try:
            raw = p.read_bytes()[:REFUSAL_BYTES].rstrip(b"\0")
            doc = json.loads(raw) if raw else None
        except (OSError, ValueError):
            continue
        if isinstance(doc, dict) and doc.get("message"):
            out.append(doc)
    return sorted(out, key=lambda d: str(d.get("time", "")))


def clear_refusals(folder: str | os.PathLike) -> None:
    """Forget the refusals of earlier runs (at the start of a run, under the experiment's lock)."""
    with contextlib.suppress(OSError):
        for p in Path(folder).glob("*.json"):
            with contextlib.suppress(OSError):
                p.unlink()
