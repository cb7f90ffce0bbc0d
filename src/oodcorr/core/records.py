"""What an evaluation and a prepared dataset record beside their outputs, read back without importing
the job that wrote it.
"""

from __future__ import annotations

import json
from pathlib import Path

from .digests import sha256_file, stat_key

META_KEY = b"oodcorr"  # the parquet key-value metadata entry that holds a result's JSON record
# keys of ``job_timing_s`` that are moments since the job's start, not stages: a job's time sums the others
JOB_MOMENTS = ("ready", "first_batch")


def job_seconds(record: dict) -> float:
    """What one evaluation cost: its checkpoint's stages, plus its job's start-up when it was the first."""
    secs = sum((record.get("timing_s") or {}).values())
    if record.get("load") == "fresh":
        secs += sum(v for k, v in (record.get("job_timing_s") or {}).items() if k not in JOB_MOMENTS)
    return secs


def read_result(path: str | Path) -> dict:
    """The result record stored in a predictions parquet's metadata (without reading its rows)."""
    import pyarrow.parquet as pq

    meta = pq.read_schema(path).metadata or {}
    if META_KEY not in meta:
        raise ValueError(f"{path}: not an oodcorr predictions file (no {META_KEY.decode()!r} metadata)")
    return json.loads(meta[META_KEY])


def local_source_changed(meta: dict) -> str | None:
    """A sentence when the local file a dataset was prepared from now holds other bytes; else None."""
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
