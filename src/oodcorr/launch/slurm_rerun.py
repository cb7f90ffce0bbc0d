"""A rerun after the submitting Snakemake died: the Snakemake lock it left, and the jobs SLURM still runs.

Snakemake leaves its lock when killed (the next run needs ``--unlock``) and the SLURM executor's jobs
run on; a rerun would submit them again. So every real run records itself (:func:`record_run`), and a
run that may write releases a Snakemake lock proven stale (else names ``--unlock``) and waits for the
earlier runs' jobs SLURM still holds (:func:`before_planning`).
"""

from __future__ import annotations

import contextlib
import datetime
import os
import shlex
import shutil
import socket
import time
from collections.abc import Callable
from pathlib import Path

from ..core.atomic_write import write_json_atomic
from ..core.defaults import RESOURCES
from ..core.io import json_or_none
from ..planning.plan import Plan
from . import slurm_cluster as slurm

RUNS = ".runs.json"  # in the experiment's log folder: the last runs of the experiment
KEEP_RUNS = 20
POLL_ENV = "OODCORR_SLURM_POLL_S"  # seconds between two looks at the queue (waiting, watching); default 30
SAY_AGAIN_S = 600  # an unchanged state is said again after this long


def poll_seconds() -> float:
    try:
        return max(0.2, float(os.environ.get(POLL_ENV, "30")))
    except ValueError:
        return 30.0


def runs_path(plan: Plan) -> Path:
    return Path(plan.paths.logs) / RUNS


def earlier_runs(plan: Plan) -> list[dict]:
    """The experiment's recorded runs, oldest first (an unreadable record reads as none)."""
    doc = json_or_none(runs_path(plan))
    runs = doc.get("runs") if isinstance(doc, dict) else None
    return [r for r in runs if isinstance(r, dict)] if isinstance(runs, list) else []


def record_run(plan: Plan, executor: str, slurm_run_id: str | None) -> None:
    """Add this run to the experiment's record (called in ``onstart``, under the experiment's lock)."""
    run = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "started": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "workdir": os.getcwd(),
        "executor": executor,
        "slurm_run_id": slurm_run_id,
    }
    with contextlib.suppress(OSError):
        write_json_atomic(runs_path(plan), {"runs": [*earlier_runs(plan), run][-KEEP_RUNS:]})


def snakemake_locks(plan: Plan) -> list[Path]:
    """Snakemake's lock files in this working folder that lock a file of the experiment."""
    root = Path(plan.paths.root)
    prefixes = tuple({f"{root}/", f"{root.resolve()}/", f"{os.path.abspath(root)}/"})
    out = []
    with contextlib.suppress(OSError):
        for f in sorted(Path(".snakemake", "locks").glob("*.lock")):
            with contextlib.suppress(OSError, UnicodeDecodeError):
                if any(line.strip().startswith(prefixes) for line in f.read_text(encoding="utf-8").splitlines()):
                    out.append(f)
    return out


def _who(run: dict) -> str:
    started = str(run.get("started", "?")).replace("T", " ")[:16]
    return f"PID {run.get('pid')} on host {run.get('host')}, started {started}"


def _describe(jobs: list[slurm.QueuedJob]) -> str:
    """``9 (build_tiny_model micro-opt, PENDING: <reason>)``, ... for a sentence."""
    rules, shown = list(RESOURCES), 6
    parts = []
    for j in jobs[:shown]:
        what = j.comment.split("_wildcards_", 1)[1].replace("_", " ") if "_wildcards_" in j.comment else ""
        why = f": {j.reason}" if j.state == "PENDING" and j.reason and j.reason != "None" else ""
        parts.append(f"{j.id} ({j.rule(rules)}{' ' + what if what else ''}, {j.state}{why})")
    more = f" and {len(jobs) - shown} more" if len(jobs) > shown else ""
    return ", ".join(parts) + more


def _earlier_jobs(plan: Plan) -> tuple[list[slurm.QueuedJob], list[dict]] | None:
    """The earlier SLURM runs' jobs that SLURM still holds, and those runs; None when squeue does not answer."""
    runs = [r for r in earlier_runs(plan) if r.get("slurm_run_id")]
    if not runs or shutil.which("squeue") is None:  # no SLURM here: none of its jobs can be waited for here
        return [], []
    jobs = slurm.queue(str(r["slurm_run_id"]) for r in runs)
    if jobs is None:
        return None
    active = [j for j in jobs if j.state in slurm.ACTIVE_STATES]
    ids = {j.name for j in active}
    return active, [r for r in runs if r["slurm_run_id"] in ids]


def _held(jobs: list[slurm.QueuedJob], runs: list[dict]) -> str:
    who = "; ".join(_who(r) for r in runs)
    return f"SLURM still holds {len(jobs)} job(s) of an earlier run of this experiment ({who}): {_describe(jobs)}"


def earlier_jobs_warning(plan: Plan) -> list[str]:
    """For a run that writes nothing (``-n``): the earlier runs' jobs SLURM still holds, if any."""
    found = _earlier_jobs(plan)
    if not found or not found[0]:
        return []
    return [f"{_held(*found)}; a run waits for them before it plans, instead of submitting them again"]


def _unlock_refusal(plan: Plan, argv: list[str], last: dict | None, shown: str, jobs: list) -> str:
    """The sentence for a Snakemake lock (``shown``: its files) that a run which ended (``last``) left."""
    who = "a run of the experiment" if last is None else f"its last run ({_who(last)}),"
    who += " which ended without releasing it (killed?)"
    if last is not None and last.get("host") != socket.gethostname():
        who += f", unless it still runs on {last.get('host')}: check there first (`ps -p {last.get('pid')}`)"
    then = (
        f"; the rerun then waits for the {len(jobs)} SLURM job(s) of that run that SLURM still holds, "
        f"{_describe(jobs)}, instead of submitting them again"
        if jobs
        else ""
    )
    return (
        f"Snakemake's lock on the files of experiment {plan.experiment!r} ({shown}, in {os.getcwd()}) was left by "
        f"{who}. No run holds the experiment's lock now, so none is writing it, but Snakemake refuses to start until "
        f"its lock is removed: run `{shlex.join([*argv, '--unlock'])}` once, then this command again{then}"
    )


def _release_stale(plan: Plan, last: dict | None, locks: list[Path], shown: str, say: Callable) -> bool:
    """Remove Snakemake's lock files on this experiment's files, as ``--unlock`` would, where the last run ran
    here and is gone (with the experiment's lock held here, that proves them stale); whether they are gone."""
    if last is None or last.get("host") != socket.gethostname():
        return False
    try:
        pid = int(last.get("pid") or 0)
        if pid > 0:
            os.kill(pid, 0)
        return False  # it runs, or its PID is unknown: it may still run
    except ProcessLookupError:
        pass  # gone
    except (TypeError, ValueError, PermissionError, OverflowError):
        return False
    try:
        for f in locks:
            f.unlink(missing_ok=True)
    except OSError:
        return False
    say(
        f"released Snakemake's lock on the files of experiment {plan.experiment!r} ({shown}), as `--unlock` would: "
        f"its last run ({_who(last)}) ended without releasing it and is gone, and no run holds the experiment's lock"
    )
    return True


def before_planning(plan: Plan, argv: list[str], say: Callable[[str], None]) -> str | None:
    """In a run that may write, holding the experiment's lock: a stale Snakemake lock released (else the
    refusal), then the earlier runs' jobs SLURM still holds waited for."""
    found = _earlier_jobs(plan)
    locks = snakemake_locks(plan)
    last = (earlier_runs(plan) or [None])[-1]
    shown = ", ".join(str(p) for p in locks[:2]) + (f" and {len(locks) - 2} more" if len(locks) > 2 else "")
    if locks and not _release_stale(plan, last, locks, shown, say):
        return _unlock_refusal(plan, argv, last, shown, (found or ([], []))[0])
    if found is None:
        return (
            f"experiment {plan.experiment!r} was run through SLURM before, and SLURM does not answer now "
            f"(squeue: {slurm.first_line(slurm.run(['squeue', '-h']))}), so this run cannot tell which of those "
            "runs' jobs still run and would submit them again. Run again when `squeue` answers"
        )
    jobs, runs = found
    if not jobs:
        return None
    try:
        wait_for(jobs, runs, say)
    except KeyboardInterrupt:
        return (
            "stopped waiting (Ctrl-C); nothing was submitted. Run the same command again to wait for the earlier "
            f"run's SLURM job(s), or `scancel {' '.join(j.id for j in jobs)}` to drop them first"
        )
    return None


def wait_for(jobs: list[slurm.QueuedJob], runs: list[dict], say: Callable[[str], None]) -> None:
    names = [str(r["slurm_run_id"]) for r in runs]
    said, said_at, quiet_since, released = None, 0.0, None, set()
    while True:
        freed = slurm.release_failed_launches(jobs, released)
        if freed:
            say(f"released SLURM job(s) {', '.join(freed)} of the earlier run, held after a failed launch (once each)")
        line = (
            f"{_held(jobs, runs)}. This run waits for them instead of submitting them again, then plans what is "
            f"left; Ctrl-C stops waiting (the jobs run on), `scancel {' '.join(j.id for j in jobs)}` drops them"
        )
        now = time.monotonic()
        if line != said or now - said_at >= SAY_AGAIN_S:
            say(line)
            said, said_at = line, now
        time.sleep(poll_seconds())
        found = slurm.queue(names)
        if found is None:
            if quiet_since is None:
                quiet_since = time.monotonic()
                say("SLURM's controller does not answer (squeue); still waiting for it and for the jobs")
            continue
        if quiet_since is not None:
            say(f"SLURM answers again, after {time.monotonic() - quiet_since:.0f} s")
            quiet_since = None
        jobs = [j for j in found if j.state in slurm.ACTIVE_STATES]
        if not jobs:
            say("the earlier run's SLURM jobs have ended; planning what is left")
            return
