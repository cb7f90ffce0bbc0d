"""Hashes and fingerprints, and the stat that says a file is unchanged since it was hashed."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any


def json_default(o: Any) -> Any:
    # numpy scalars and paths appear in provenance dicts
    if hasattr(o, "item"):
        return o.item()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def sha256_file(path: str | os.PathLike) -> str:
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def sha256_files(named: Iterable[tuple[str, str | os.PathLike]]) -> str:
    """The sha256 over several files in order: each one's name, a NUL, then its bytes."""
    h = hashlib.sha256()
    for name, path in named:
        h.update(name.encode() + b"\0")
        with open(path, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()


def short_tag(text: str, n: int) -> str:
    """The first ``n`` hex digits of the sha256 of ``text``, for a file or folder name."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:n]


def stat_key(path: str | os.PathLike) -> list[int]:
    """Size, mtime, ctime and inode: any write changes the ctime, so an edit that restores the mtime
    still changes the key."""
    st = os.stat(path)
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


def sha256_json(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=json_default).encode()).hexdigest()


def canonical(obj: Any) -> Any:
    """A copy with every mapping's keys sorted, so reordering YAML keys changes no params."""
    if isinstance(obj, dict):
        return {k: canonical(obj[k]) for k in sorted(obj)}
    if isinstance(obj, list):
        return [canonical(x) for x in obj]
    return obj
