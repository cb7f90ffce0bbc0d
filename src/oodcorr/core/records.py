"""What the jobs record beside their outputs, read back by planning, aggregation and the budget.

One home for each on-disk record that a job writes and something else reads, so that a reader
needs no import of the job that wrote it (and planning none of torch):

* a predictions file's result record, in its parquet metadata under :data:`META_KEY`
  (written by :mod:`oodcorr.jobs.predictions`, read by :func:`read_result`);
* a tokenised testset's sidecar, ``<testset>.info.json`` (:func:`cache_info_path`), and whether
  the cache is whole and made by the tokenizer now on disk (:func:`cache_problem`);
* a prepared dataset's meta file, and whether the local file it came from changed since
  (:func:`local_source_changed`);
* a staged result's seal, ``.<name>.sha256`` beside it in ``.staging/`` (:func:`seal`, written
  by the job that made the file, :func:`check_seal`, read by publishing);
* the publish record, ``publish_record.json`` in each published version and
  ``results/<experiment>/published.json`` (:func:`read_publish_record`; written by
  :mod:`oodcorr.core.published`, read there, by planning and by the report).

Nothing here imports another oodcorr module but the core helpers.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from .io import sha256_file, stat_key, write_json_atomic

META_KEY = b"oodcorr"  # the parquet key-value metadata entry that holds a result's JSON record
# keys of a record's ``job_timing_s`` that are moments (seconds from the job's process start to its
# first scoring, and to its first batch scored), not stages: a job's time is the sum of the others
JOB_MOMENTS = ("ready", "first_batch")


def job_seconds(record: dict) -> float:
    """What one evaluation cost, from its record: its checkpoint's stages, plus its job's start-up
    stages when it was the job's first (``load`` ``fresh``), never the moments of :data:`JOB_MOMENTS`."""
    secs = sum((record.get("timing_s") or {}).values())
    if record.get("load") == "fresh":
        secs += sum(v for k, v in (record.get("job_timing_s") or {}).items() if k not in JOB_MOMENTS)
    return secs


def cache_info_path(cache_path: str | Path) -> Path:
    """The small JSON beside a tokenised cache (``<testset>.info.json``): its size and how many
    prompts were cut to ``max_length``."""
    p = Path(cache_path)
    return p.with_name(p.name.removesuffix(".pt") + ".info.json")


def read_result(path: str | Path) -> dict:
    """The result record stored in a predictions parquet's metadata (without reading its rows)."""
    import pyarrow.parquet as pq

    meta = pq.read_schema(path).metadata or {}
    if META_KEY not in meta:
        raise ValueError(f"{path}: not an oodcorr predictions file (no {META_KEY.decode()!r} metadata)")
    return json.loads(meta[META_KEY])


def local_source_changed(meta: dict) -> str | None:
    """Whether the local file a dataset was prepared from (its meta.json) now holds other bytes.

    Returns a sentence naming the file, or None when it is unchanged, is not a local file,
    or is gone (planning names a missing file itself). The file's stat recorded when it was
    prepared (:func:`oodcorr.core.io.stat_key`) saves hashing a file nobody touched; an edit,
    even one that restores the modification time, changes the stat, and the sha256 decides.
    """
    fingerprint = str(meta.get("fingerprint") or "")
    if meta.get("source") != "local" or not fingerprint.startswith("sha256:") or not meta.get("path"):
        return None
    path = Path(meta["path"])
    if not path.is_file() or meta.get("source_stat") == stat_key(path):
        return None
    now = "sha256:" + sha256_file(path)
    if now == fingerprint:
        return None
    return (
        f"{path} changed after dataset {meta.get('name')!r} was prepared from it (its sha256 is now "
        f"{now[7:19]}..., the prepared copy's {fingerprint[7:19]}...)"
    )


# ---- staged results: sealed by the job that made them, checked before they are published -----
def seal_path(path: str | Path) -> Path:
    """Where a staged file's seal is: ``.<name>.sha256`` beside it."""
    p = Path(path)
    return p.with_name(f".{p.name}.sha256")


def seal(paths) -> None:
    """Record each just-written staged file's size and sha256 beside it (its seal), as the last
    step of the job that made it, so that publishing can tell the file it made from one changed
    or cut short since (:func:`check_seal`)."""
    for path in paths:
        write_json_atomic(seal_path(path), {"sha256": sha256_file(path), "size": Path(path).stat().st_size})


def check_seal(path: str | Path, sha256: str) -> str | None:
    """Whether staged ``path`` (whose sha256 is ``sha256``) is what its job wrote: None when its seal
    agrees, ``"unsealed"`` when it has none (made before seals existed), else a sentence naming it."""
    try:
        doc = json.loads(seal_path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return "unsealed"
    except (OSError, ValueError):
        doc = None
    if not isinstance(doc, dict) or not isinstance(doc.get("sha256"), str):
        return f"{path}: its seal {seal_path(path)} is unreadable"
    if doc["sha256"] != sha256:
        return (
            f"{path} changed after the job that made it wrote it (size {Path(path).stat().st_size} bytes, "
            f"{doc.get('size')} when written; sha256 {sha256[:12]}..., {doc['sha256'][:12]}... when written)"
        )
    return None


# ---- a tokenised testset, checked without torch ----------------------------------------------
def rebuild_hint(path: str | os.PathLike) -> str:
    """What to do about a tokenised testset that cannot be used."""
    return (
        f"delete it and {cache_info_path(path)} and run again: rule tokenize_testset makes it again with this "
        "model's tokenizer (an evaluation whose result is unchanged keeps its predictions file)"
    )


def _zip_whole(path: Path) -> bool:
    """Whether a torch.save file (a zip archive) still ends with its central directory's end record."""
    size = path.stat().st_size
    with open(path, "rb") as fh:
        if fh.read(4) != b"PK\x03\x04":
            return False
        fh.seek(max(0, size - (1 << 16) - 22))
        return b"PK\x05\x06" in fh.read()


def cache_problem(path: str | os.PathLike, tokenizer: str | None) -> str | None:
    """Why the tokenised testset at ``path`` cannot be used, from its structure and its sidecar (no
    torch): cut short (a torch.save zip without its end record), no readable sidecar, or made by
    another tokenizer than ``tokenizer`` (when both are known); None when it looks whole."""
    path = Path(path)
    try:
        if not _zip_whole(path):
            return f"{path}: the tokenised testset is cut short or damaged (not a whole torch.save file)"
    except OSError as e:
        return f"{path}: the tokenised testset cannot be read ({e.strerror or e})"
    try:
        info = json.loads(cache_info_path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return f"{path}: the tokenised testset's sidecar {cache_info_path(path)} is missing or unreadable"
    made_by = info.get("tokenizer") if isinstance(info, dict) else None
    if tokenizer and made_by and made_by != tokenizer:
        return other_tokenizer(path, made_by, tokenizer)
    return None


def other_tokenizer(path, made_by: str, tokenizer: str) -> str:
    return (
        f"{path}: the tokenised testset was made by another tokenizer (files sha256 {made_by[:12]}...) than this "
        f"model's ({tokenizer[:12]}...): another model's cache, or this model's from before its tokenizer files "
        "changed; its token ids would be scored as this model's"
    )


# ---- what was published --------------------------------------------------------------------
PUBLISH_RECORD = "publish_record.json"  # in each published version folder
RECORD_FORMAT = 1


def read_publish_record(path: str | Path) -> dict | None:
    """A publish record (``{"format", "experiment", "version", "published", "files": {rel: {"sha256",
    "size", "stat"}}}``), or None when it is missing or not one."""
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("files"), dict):
        return None
    if not all(isinstance(v, dict) and isinstance(v.get("sha256"), str) for v in doc["files"].values()):
        return None
    return doc
