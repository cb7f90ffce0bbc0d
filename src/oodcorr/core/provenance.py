"""What made a result: the code that ran and the model libraries the jobs ran with. Recorded beside
results, never in a param or a digest: a new commit reruns nothing.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import subprocess
from collections import Counter
from pathlib import Path

from .. import __version__
from .errors import ResultError
from .published import PUBLISH_RECORD, read_publish_record

UNKNOWN = "unknown"
NOT_RECORDED = "not recorded"  # a record written before records kept the libraries
LIBRARIES = ("torch", "transformers", "peft")
PROVENANCE_FILE = "provenance.json"  # in the published set, beside scores.csv
_PACKAGE = Path(__file__).resolve().parents[1]  # src/oodcorr (or site-packages/oodcorr)
_GIT_SECONDS = 10


def library_versions(names=LIBRARIES) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in names:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def _git(*args: str) -> str | None:
    """A read-only git command's output in the package's folder (without the caller's GIT_* settings), or None."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    try:
        res = subprocess.run(
            ["git", "--no-optional-locks", *args],
            cwd=_PACKAGE,
            env=env,
            capture_output=True,
            text=True,
            timeout=_GIT_SECONDS,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return res.stdout if res.returncode == 0 else None


def code_provenance() -> dict:
    """What code this process runs: the versions of oodcorr, Python and Snakemake, and the git state: the
    commit of the checkout the running package is tracked in and whether the tracked files differ from it,
    ``"unknown"`` for both where it is none (a wheel, even inside a repository) or git cannot say."""
    commit, dirty = UNKNOWN, UNKNOWN
    if _git("ls-files", "--error-unmatch", "--", "__init__.py") is not None:
        commit = (_git("rev-parse", "HEAD") or "").strip() or UNKNOWN
        status = _git("status", "--porcelain", "--untracked-files=no")
        if commit != UNKNOWN and status is not None:
            dirty = bool(status.strip())
    return {
        "oodcorr": __version__,
        "git_commit": commit,
        "git_dirty": dirty,
        "python": platform.python_version(),
        "snakemake": library_versions(("snakemake",))["snakemake"],
    }


def _count(libraries: list) -> dict[str, dict[str, int]]:
    """``{library: {version: count}}`` over the records' library dicts (None: not recorded)."""
    out: dict[str, Counter] = {name: Counter() for name in LIBRARIES}
    for libs in libraries:
        for name in LIBRARIES:
            version = libs.get(name, NOT_RECORDED) if isinstance(libs, dict) else NOT_RECORDED
            out[name][str(version) if version is not None else "not installed"] += 1
    return {name: dict(sorted(c.items())) for name, c in out.items() if c}


def scores_provenance(records: list[dict]) -> dict:
    """``provenance.json`` of the published set: the libraries behind the evaluation ``records``, counted per
    evaluation and per finetuned checkpoint (a series checkpoint, with an ``x_unit``, was not), and the code."""
    finetuned = {r.get("checkpoint"): r.get("finetune_libraries") for r in records if "x_unit" not in r}
    return {
        "evaluate": _count([r.get("libraries") for r in records]),
        "finetune": _count(list(finetuned.values())),
        "aggregated_by": code_provenance(),
    }


def table_provenance(table: str | os.PathLike, sha256: str) -> dict:
    """``settings.json``'s provenance for an analysis of ``table``: this process's code and, where the workflow
    published ``table`` with this ``sha256``, the libraries of the jobs behind it."""
    doc: dict = {"analysed_by": code_provenance()}
    folder = Path(table).resolve().parent
    try:
        record = read_publish_record(folder / PUBLISH_RECORD)
    except ResultError:  # another version's record: its libraries are not read (the code's are still said)
        return doc
    if record is None or (record["files"].get(Path(table).resolve().name) or {}).get("sha256") != sha256:
        return doc
    return doc | published_jobs(folder / PROVENANCE_FILE)


def published_jobs(path: str | os.PathLike) -> dict:
    """The libraries of the finetunes and evaluations behind a published set, from its ``provenance.json``;
    {} where the file is missing or unreadable (provenance is a record, never a reason to stop)."""
    try:
        published = json.loads(Path(path).read_text(encoding="utf-8"))
        return {k: published[k] for k in ("finetune", "evaluate") if isinstance(published[k], dict)}
    except (OSError, ValueError, KeyError, TypeError):
        return {}
