"""The experiment folder seen from the Snakefile's main process: its lock and the config that wrote it last.

Snakemake's own lock covers one working folder's ``.snakemake/``; the experiment's lock (an ``flock``)
covers every checkout whose ``results/`` is that folder, taken while planning so that a second run
stops before any job. ``experiment.json`` records the config that last wrote the folder: another config
is warned of, and refused where Snakemake keeps no record of what the folder was made with. A run that
only looks (:func:`may_write` is false) takes no lock and changes nothing.
"""

from __future__ import annotations

import atexit
import datetime
import os
import socket
import sys
import uuid
from pathlib import Path

from ..core import published
from ..core.atomic_write import write_json_atomic
from ..core.digests import sha256_json, short_tag
from ..core.errors import WriteFailed
from ..core.io import json_or_none
from ..core.locks import EXPERIMENT, FolderInUse, acquire, release
from ..core.provenance import code_provenance, published_jobs
from ..planning.layout import Paths
from ..planning.plan import Plan

IDENTITY = "experiment.json"
# experiment folder -> the warning planning gave about the config, repeated at the end of the run
_SAID: dict[str, str] = {}
# experiment folder -> the refusal of :func:`_written_elsewhere`, given by :func:`lock` to a run that may write
_REFUSED: dict[str, str | None] = {}
# the rules whose params read the config's analysis block (PLAN.analysis, PLAN.score) and that no
# rule downstream of partial_correlations covers: what a change of the analysis alone reruns
ANALYSIS_RULES = ("partial_correlations", "scatter", "learning_curves")


def _config_identity(config_files, config: dict) -> dict:
    return {"configs": [str(Path(f).resolve()) for f in config_files], "config_sha256": sha256_json(config)}


def _read_identity(root: Path) -> dict | None:
    doc = json_or_none(root / IDENTITY)
    whole = (
        isinstance(doc, dict)
        and isinstance(doc.get("configs"), list)
        and isinstance(doc.get("config"), dict)
        and isinstance(doc.get("records_id"), str)
    )
    return doc if whole else None


# in the working folder, beside Snakemake's own records: which record of each experiment folder the
# runs here wrote (a copy of the working folder, .snakemake/ with it, keeps it; a copy or a move of the
# experiment folder alone, another checkout sharing results/, or .snakemake/ deleted does not)
RECORDS_MARKS = Path(".snakemake") / "oodcorr-experiments"


def _mark(root: Path) -> Path:
    return RECORDS_MARKS / f"{short_tag(str(root), 20)}.json"


def _records_here(root: Path, old: dict) -> bool:
    """Whether this working folder's Snakemake records are those of the runs that wrote ``root``."""
    doc = json_or_none(_mark(root))
    return isinstance(doc, dict) and doc.get("records_id") == old.get("records_id") is not None


def _forced(argv: list[str]) -> tuple[bool, set[str]]:
    """(whether ``--forceall``/``-F`` is given, the rules ``--forcerun``/``-R`` names)."""
    every, rules, taking = False, set(), False
    for a in argv[1:]:
        if a.startswith("-"):
            name, _, value = a.partition("=")
            every = every or name in ("--forceall", "-F")
            taking = name in ("--forcerun", "-R")
            if taking and value:
                rules.add(value)
        elif taking:
            rules.add(a)
    return every, rules


def _written_elsewhere(plan: Plan, old: dict | None, config: dict) -> str | None:
    """The refusal of a run whose config changes a folder Snakemake holds no record of here (copied, moved,
    or written from another working folder; ``old``: its record). None when the run forces what it needs."""
    root = Path(plan.paths.root)
    if old is None:
        return None  # never written
    moved = not _records_here(root, old)
    if not moved and old.get("records") != "partial":
        return None
    keys = (set(old["config"]) | set(config)) - {"experiment"}  # the top-level keys that differ
    changes = sorted(k for k in keys if sha256_json(old["config"].get(k)) != sha256_json(config.get(k)))
    if not changes:
        return None
    every, rules = _forced(sys.argv)
    analysis_only = changes == ["analysis"]
    if every or (analysis_only and set(ANALYSIS_RULES) <= rules):
        return None
    where = (
        f"its results were made as {old.get('folder')}, run from {old.get('workdir')}"
        if moved
        else "a run took it over from another folder without running everything again"
    )
    fix = (
        f"`--forcerun {' '.join(ANALYSIS_RULES)}` (only the analysis differs: nothing is trained or evaluated again)"
        if analysis_only
        else "`--forceall` (every job runs again; a finetune whose settings did not change reuses its checkpoints)"
    )
    return (
        f"experiment {plan.experiment!r} ({root}) was last written by config {', '.join(old['configs'])}, and "
        f"Snakemake keeps no record here of the settings its results were made with ({where}): it would run "
        f"nothing for what this run's config changes ({', '.join(changes)}). To carry the experiment on under this "
        f"config, run once with {fix}; to keep both, give this config its own `experiment:` name. If what differs "
        f"changes no result (resources, a batch size), remove {root / IDENTITY}: the folder is then taken as it is"
    )


def config_warning(plan: Plan, config_files, config: dict) -> str | None:
    """A warning when another config wrote this experiment folder last, or :func:`_written_elsewhere`'s refusal."""
    root = Path(plan.paths.root)
    old = _read_identity(root)
    elsewhere = _REFUSED[str(root)] = _written_elsewhere(plan, old, config)
    if elsewhere:
        _SAID[str(root)] = elsewhere
        return elsewhere
    mine = _config_identity(config_files, config)
    if old is None or old["configs"] == mine["configs"] or old.get("config_sha256") == mine["config_sha256"]:
        return None
    when = f" (on {old.get('host', '?')}, {old.get('written', '?')})"
    warning = (
        f"experiment {plan.experiment!r} ({root}) was last written by config {', '.join(old['configs'])}{when}; "
        f"this run's config, {', '.join(mine['configs'])}, has the same `experiment:` name and writes into that "
        "experiment, replacing its results where the configs differ (checkpoints of other settings kept aside as "
        "checkpoints.stale-*). If it is another experiment, stop and give the config its own `experiment:` name"
    )
    _SAID[str(root)] = warning
    return warning


def warnings_given(plan: Plan) -> list[str]:
    """The warnings of :func:`config_warning` this process gave for ``plan``, for the end of the run."""
    w = _SAID.get(str(Path(plan.paths.root)))
    return [w] if w else []


# Snakemake's options after which no job runs and nothing is written to the experiment folder
_NO_WRITE_OPTIONS = frozenset(
    "--dry-run --dryrun --report --unlock --lint --summary --detailed-summary --list-changes --lc --list-rules "
    "--list --list-target-rules --lt --list-input-changes --li --list-params-changes --lp --list-code-changes "
    "--list-untracked --dag --d3dag --rulegraph --filegraph --containerize --export-cwl --print-compilation "
    "--conda-create-envs-only --generate-unit-tests --archive --cleanup-metadata --cm --help --version".split()
)
_NO_WRITE_SHORT = frozenset("nSDlh")  # -n (dry run), -S/-D (summaries), -l (list rules), -h


def may_write(argv: list[str]) -> bool:
    """Whether this Snakemake may run jobs (the Snakefile is read before Snakemake's own settings say so)."""
    for a in argv[1:]:
        if a.split("=", 1)[0] in _NO_WRITE_OPTIONS:
            return False
        if len(a) > 1 and a[0] == "-" and a[1] != "-" and a[1:].isalpha() and set(a[1:]) & _NO_WRITE_SHORT:
            return False
    return True


def lock(plan: Plan, config_files) -> str | None:
    """Take the experiment's lock for the rest of this process; None, or the sentence that refuses the run."""
    root = Path(plan.paths.root)
    configs = ", ".join(str(Path(f).resolve()) for f in config_files)
    try:
        held = acquire(root, EXPERIMENT, extra={"config": configs, "experiment": plan.experiment})
        atexit.register(release, held)  # (the kernel lets go anyway; this also clears the holder's name)
    except FolderInUse as e:
        return str(e)
    except OSError as e:
        return (
            f"{root}: cannot take the experiment's lock ({e.strerror or e}). Check that the folder is writable and "
            "that its file system supports locks (flock)"
        )
    return _REFUSED.get(str(root))


def lock_and_record(plan: Plan, config_files, config: dict) -> str | None:
    """Hold the experiment's lock and record this run's config; None, or the refusal."""
    refusal = lock(plan, config_files)
    if refusal:
        return refusal
    root = Path(plan.paths.root)
    old = _read_identity(root)
    keep = old is not None and _records_here(root, old)  # else this working folder's records start a new lineage
    # Snakemake's records here cover every output only if every run that wrote the folder ran here, or
    # one ran everything here (--forceall) after it came from elsewhere
    inherited = old is not None and (not keep or old.get("records") == "partial")
    records = "partial" if inherited and not _forced(sys.argv)[0] else "complete"
    here = {"folder": str(root.resolve()), "workdir": str(Path.cwd().resolve())}  # workdir: Snakemake's records
    new = dict(
        _config_identity(config_files, config), config=config, records=records, **here, provenance=_provenance(plan)
    )
    new["records_id"] = old["records_id"] if keep else uuid.uuid4().hex
    if old is None or any(old.get(k) != new[k] for k in new):
        write_json_atomic(
            root / IDENTITY,
            dict(
                new,
                experiment=plan.experiment,
                host=socket.gethostname(),
                pid=os.getpid(),
                written=datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            ),
        )
    write_json_atomic(_mark(root), {"folder": str(root), "records_id": new["records_id"]})
    return None


def _provenance(plan: Plan) -> dict:
    return {"run": code_provenance()} | published_jobs(plan.paths.provenance)


def record_provenance(plan: Plan) -> str | None:
    """The record names the libraries of the published scores; None, or a warning when it could not be written."""
    root = Path(plan.paths.root)
    old = _read_identity(root)
    if old is None:
        return None
    try:
        write_json_atomic(root / IDENTITY, dict(old, provenance=_provenance(plan)))
    except (OSError, WriteFailed) as e:
        return (
            f"{root / IDENTITY} was not brought up to date with the libraries of the scores this run published "
            f"({e}); the results are published, and {plan.paths.provenance} names those libraries"
        )
    return None


def experiment_folder(out: Path) -> Path | None:
    """The workflow's experiment folder that ``out`` is (or is inside), or None."""
    here = Path(out).resolve()
    for d in (here, *here.parents):
        marks = (
            d / published.PUBLISHED,
            Path(Paths(str(d)).staging),
            d / EXPERIMENT.file,
            d / IDENTITY,
            d / published.MARKER,
        )
        if any(m.exists() for m in marks):
            return d
    return None
