"""A staged result's seal, ``.<name>.sha256`` beside it: written by the job that made the file, checked
before it is published.
"""

from __future__ import annotations

from pathlib import Path

from .atomic_write import write_json_atomic
from .digests import sha256_file
from .errors import ResultError
from .io import json_or_none


def seal_path(path: str | Path) -> Path:
    p = Path(path)
    return p.with_name(f".{p.name}.sha256")


def seal(paths) -> None:
    """Record each just-written staged file's size and sha256 beside it, the last step of its job."""
    for path in paths:
        write_json_atomic(seal_path(path), {"sha256": sha256_file(path), "size": Path(path).stat().st_size})


def check_seal(path: str | Path, sha256: str) -> str | None:
    """None when staged ``path`` (sha256 ``sha256``) agrees with its seal, else a sentence naming it."""
    if not seal_path(path).exists():
        return f"{path} has no seal ({seal_path(path)}): put there by hand, or by an earlier version of oodcorr"
    doc = json_or_none(seal_path(path))
    if not isinstance(doc, dict) or not isinstance(doc.get("sha256"), str):
        return f"{path}: its seal {seal_path(path)} is unreadable"
    if doc["sha256"] != sha256:
        return (
            f"{path} changed after the job that made it wrote it (size {Path(path).stat().st_size} bytes, "
            f"{doc.get('size')} when written; sha256 {sha256[:12]}..., {doc['sha256'][:12]}... when written)"
        )
    return None


def remake_hint(made_by: str, source: str) -> str:
    """The way out of a damaged file the workflow made itself: deleted, ``made_by`` makes it again."""
    return (
        f"it is the workflow's own file, so deleting it is safe: delete it and run again, and {made_by} makes it "
        f"again from {source} (nothing is trained or evaluated again)"
    )


def check_staged(path: str | Path, made_by: str, source: str) -> None:
    """A :class:`~oodcorr.core.errors.ResultError` when staged ``path`` is not what its job wrote."""
    why = check_seal(path, sha256_file(path))
    if why:
        raise ResultError(f"{why}; {remake_hint(made_by, source)}")
