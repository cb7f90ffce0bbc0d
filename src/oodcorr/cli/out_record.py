"""What ``oodcorr analyse`` wrote into ``--out``, recorded there (:data:`RECORD`), so that the next analysis
into that folder removes the earlier one's outputs it does not write again (those still as it left them);
anything else is left alone and named."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

from ..core.atomic_write import write_json_atomic
from ..core.digests import stat_key

RECORD = ".oodcorr-analyse.json"
RECORD_FORMAT = 1  # the record's layout: {"format", "files": {path below --out: stat key}}
SHOWN = 5  # files named in a line at most


def snapshot(out: Path) -> dict[str, list[int]]:
    """Every regular file under ``out`` but the record, by its path below ``out``: its stat key."""
    found: dict[str, list[int]] = {}
    for root, _dirs, files in os.walk(out):
        for name in files:
            p = Path(root) / name
            rel = p.relative_to(out).as_posix()
            if rel == RECORD or p.is_symlink() or not p.is_file():
                continue
            with contextlib.suppress(OSError):
                found[rel] = stat_key(p)
    return found


def _shown(rels: list[str]) -> str:
    return ", ".join(rels[:SHOWN]) + (f" and {len(rels) - SHOWN} more" if len(rels) > SHOWN else "")


def _read(out: Path) -> tuple[dict | None, str | None]:
    path = out / RECORD
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(doc, dict) and doc.get("format") != RECORD_FORMAT:
            return None, (
                f"{path}, the record of what an earlier analysis wrote there, is of format {doc.get('format')!r}, "
                f"not {RECORD_FORMAT} (another version of oodcorr wrote it)"
            )
        files = doc["files"]
        if not isinstance(files, dict):
            raise TypeError("files")
        return files, None
    except FileNotFoundError:
        return None, None
    except (OSError, ValueError, KeyError, TypeError) as e:
        return None, f"{path}, the record of what an earlier analysis wrote there, is unreadable ({type(e).__name__})"


def settle(out: Path, before: dict[str, list[int]]) -> list[str]:
    """Remove what the earlier analysis wrote and this one did not (as it was left), record what this one
    wrote, and return the lines saying what was removed, kept or left."""
    after = snapshot(out)
    written = {rel: key for rel, key in after.items() if before.get(rel) != key}
    old, damaged = _read(out)
    lines = []
    if old is None:
        left = sorted(set(after) - set(written))
        if left:
            why = (
                f"{damaged}, so"
                if damaged
                else "--out was written before analyses recorded what they write there (or by someone else), so"
            )
            lines.append(
                f"{out}: {why} the {len(left)} file(s) there that this analysis did not write are left as they were: "
                f"{_shown(left)}. They may be of another input: delete them, or give a new --out"
            )
    else:
        removed, kept = [], []
        for rel, key in sorted(old.items()):
            if rel in written or rel not in after:
                continue
            if after[rel] != key:
                kept.append(rel)
                continue
            with contextlib.suppress(OSError):  # then its folders left empty, up to --out: a failing rmdir ends it
                (out / rel).unlink()
                removed.append(rel)
                folder = (out / rel).parent
                while folder != out and out in folder.parents:
                    folder.rmdir()
                    folder = folder.parent
        if removed:
            lines.append(
                f"removed {len(removed)} file(s) of the earlier analysis in {out} that this one does not write: "
                f"{_shown(removed)}"
            )
        lines += [
            f"{out / rel}: written by an earlier analysis and changed since: kept (delete it if it is not of this one)"
            for rel in kept
        ]
    write_json_atomic(out / RECORD, {"format": RECORD_FORMAT, "files": written})
    return lines
