"""What the jobs record beside their outputs, read back by planning, aggregation and the budget,
so that a reader needs no import of the job that wrote it: a predictions file's result record, a
tokenised testset's sidecar, a dataset's source, a staged result's seal, the publish record and a
job's refusal.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

from .errors import ResultError
from .io import sha256_file, sha256_json, short_tag, stat_key, write_json_atomic

META_KEY = b"oodcorr"  # the parquet key-value metadata entry that holds a result's JSON record
# keys of a record's ``job_timing_s`` that are moments (seconds from the job's process start to its
# first scoring, and to its first batch scored), not stages: a job's time is the sum of the others
JOB_MOMENTS = ("ready", "first_batch")


def job_seconds(record: dict) -> float:
    """What one evaluation cost: its checkpoint's stages, plus its job's start-up when it was the first."""
    secs = sum((record.get("timing_s") or {}).values())
    if record.get("load") == "fresh":
        secs += sum(v for k, v in (record.get("job_timing_s") or {}).items() if k not in JOB_MOMENTS)
    return secs


def cache_info_path(cache_path: str | Path) -> Path:
    """The sidecar beside a tokenised testset: ``<testset>.info.json``."""
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
    """A sentence when the local file a dataset was prepared from now holds other bytes; else None
    (the recorded stat saves hashing an untouched file).
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
    """Record each just-written staged file's size and sha256 beside it, the last step of its job."""
    for path in paths:
        write_json_atomic(seal_path(path), {"sha256": sha256_file(path), "size": Path(path).stat().st_size})


def check_seal(path: str | Path, sha256: str) -> str | None:
    """None when staged ``path`` (sha256 ``sha256``) agrees with its seal, else a sentence naming it."""
    try:
        doc = json.loads(seal_path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return (
            f"{path} has no seal ({seal_path(path)}): the job that makes it writes one last, so it was put there "
            "by hand, or by an earlier version of oodcorr"
        )
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


# ---- a tokenised testset, checked without torch ----------------------------------------------
TOKENIZED_FORMAT = 3  # the tokenised testset's format: 3 records its model, and its sidecar a digest of its bytes
# what decides a tokenised testset's content: the params of rule tokenize_testset
# (oodcorr.planning.plan.Plan.tokenize_params)
TOKENIZE_SETTINGS = ("model_spec", "built_model_dir", "prompt", "labels", "coarse", "max_length")


def tokenize_settings_digest(settings: dict) -> str:
    """The digest of what decides a tokenised testset's content (:data:`TOKENIZE_SETTINGS`)."""
    return sha256_json({k: settings.get(k) for k in TOKENIZE_SETTINGS})


def rebuild_hint(path: str | os.PathLike) -> str:
    """What to do about a tokenised testset that cannot be used."""
    return (
        f"delete it and {cache_info_path(path)} and run again: rule tokenize_testset makes it again with this "
        "model's tokenizer (an evaluation whose result is unchanged keeps its predictions file)"
    )


def _zip_whole(path: Path) -> bool:
    """Whether a torch.save file (a zip) still ends with its central directory's end record."""
    size = path.stat().st_size
    with open(path, "rb") as fh:
        if fh.read(4) != b"PK\x03\x04":
            return False
        fh.seek(max(0, size - (1 << 16) - 22))
        return b"PK\x05\x06" in fh.read()


def read_cache_info(path: str | os.PathLike) -> tuple[dict | None, str | None]:
    """A tokenised testset's sidecar, and why it cannot vouch for the cache (None when it can)."""
    info_path = cache_info_path(path)
    try:
        info = json.loads(info_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        info = None
    if not isinstance(info, dict):
        return (
            None,
            f"{path}: the tokenised testset's sidecar {info_path} is missing or unreadable, so it cannot be checked",
        )
    if info.get("format") != TOKENIZED_FORMAT or not isinstance(info.get("sha256"), str):
        return info, (
            f"{path}: the tokenised testset was made before tokenised testsets recorded their tokenizer and the "
            "digest of their content (its sidecar has neither), so whose tokenizer made it, and whether it is "
            "what was written, cannot be checked"
        )
    return info, None


def misplaced_cache(path, holds: tuple, belongs: tuple) -> str:
    """The sentence for a tokenised testset of testset and model ``holds`` where ``belongs``'s is."""
    return (
        f"{path}: the tokenised testset holds testset {holds[0]!r} of model {holds[1]!r}, but sits where testset "
        f"{belongs[0]!r} of model {belongs[1]!r} belongs (copied over it, or two caches swapped?); its prompts "
        f"would be scored as {belongs[0]!r}'s"
    )


def cache_problem(
    path: str | os.PathLike, tokenizer: str | None, testset: str | None = None, model: str | None = None
) -> str | None:
    """Why the tokenised testset at ``path`` cannot be used (cut short, no sidecar, an old format,
    another testset's or model's, another tokenizer's), without torch or hashing; None when it looks whole.
    """
    path = Path(path)
    try:
        if not _zip_whole(path):
            return f"{path}: the tokenised testset is cut short or damaged (not a whole torch.save file)"
        size = path.stat().st_size
    except OSError as e:
        return f"{path}: the tokenised testset cannot be read ({e.strerror or e})"
    info, why = read_cache_info(path)
    if why:
        return why
    if info.get("size") != size:
        return (
            f"{path}: the tokenised testset is {size} bytes, but {info.get('size')} bytes were written (its sidecar "
            f"{cache_info_path(path)}): cut short, or another file copied over it"
        )
    holds = (info.get("testset"), info.get("model"))
    if (testset and holds[0] != testset) or (model and holds[1] != model):
        return misplaced_cache(path, holds, (testset or holds[0], model or holds[1]))
    made_by = info.get("tokenizer")
    if tokenizer and made_by != tokenizer:
        return other_tokenizer(path, made_by, tokenizer)
    return None


def other_tokenizer(path, made_by: str | None, tokenizer: str) -> str:
    if not made_by:
        return (
            f"{path}: the tokenised testset does not record the tokenizer that made it, so it cannot be checked "
            f"against this model's ({tokenizer[:12]}...)"
        )
    return (
        f"{path}: the tokenised testset was made by another tokenizer (files sha256 {made_by[:12]}...) than this "
        f"model's ({tokenizer[:12]}...): another model's cache, or this model's from before its tokenizer files "
        "changed; its token ids would be scored as this model's"
    )


# ---- what was published --------------------------------------------------------------------
PUBLISH_RECORD = "publish_record.json"  # in each published version folder
RECORD_FORMAT = 1
# what remakes a publish record (and a copy of it, published.json): the set published again from staging
REPUBLISH = "snakemake --forcerun publish_results"


def read_publish_record(path: str | Path) -> dict | None:
    """A publish record, or None when missing or not one; another format is a
    :class:`~oodcorr.core.errors.ResultError` naming the file and :data:`REPUBLISH`.
    """
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("files"), dict):
        return None
    if doc.get("format") != RECORD_FORMAT:
        raise ResultError(
            f"{path}: a publish record of format {doc.get('format')!r}, not {RECORD_FORMAT}: written by another "
            f"version of oodcorr, which this one does not read; `{REPUBLISH}` publishes the set again with a "
            "record of this version (nothing is trained, evaluated or analysed again)"
        )
    if not all(isinstance(v, dict) and isinstance(v.get("sha256"), str) for v in doc["files"].values()):
        return None
    return doc


# ---- a job's refusal, repeated on the console when the run ends ------------------------------------
REFUSALS_ENV = "OODCORR_REFUSALS"  # the folder of this run's refusal records, set by the Snakefile for its jobs
REFUSAL_BYTES = 16384  # a record's room, taken when the job starts: a full disk cannot stop it being written


def refusals_dir(logs: str | os.PathLike) -> Path:
    """Where the jobs of an experiment whose logs are in ``logs`` record their refusals."""
    return Path(logs) / ".refused"


class RefusalSlot:
    """One job's refusal record, its room taken when the job starts (a full disk cannot stop it): :meth:`fill`
    it with the sentence the job stops with, or :meth:`drop` it. ``killed``: what it holds meanwhile, left if the
    job is killed before it can say why. Nothing here raises.
    """

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
    """The refusals recorded in ``folder``, oldest first; empty or unreadable slots left out."""
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
