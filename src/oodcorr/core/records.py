"""What the jobs record beside their outputs, read back by planning, aggregation and the budget.

One home for each on-disk record that a job writes and something else reads, so that a reader
needs no import of the job that wrote it (and planning none of torch):

* a predictions file's result record, in its parquet metadata under :data:`META_KEY`
  (written by :mod:`oodcorr.jobs.evaluate`, read by :func:`read_result`);
* a tokenised testset's sidecar, ``<testset>.info.json`` (:func:`cache_info_path`);
* a prepared dataset's meta file, and whether the local file it came from changed since
  (:func:`local_source_changed`).

Nothing here imports another oodcorr module but the core helpers.
"""

from __future__ import annotations

import json
from pathlib import Path

from .io import sha256_file, stat_key

META_KEY = b"oodcorr"  # the parquet key-value metadata entry that holds a result's JSON record


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
