"""Room on the file systems a run writes in besides its results, checked before any job starts."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from ..core.filesystems import human_bytes, room
from ..core.gpus import LOCK_DIR_ENV as GPU_LOCK_DIR_ENV
from ..core.locks import LOCK_DIR_ENV
from ..planning.plan import Plan
from .budget import job_counts

# Snakemake's ILP scheduler (pulp) writes the problem of the jobs ready at once in its temp folder, and the
# solver its solution beside it, before it starts them: about 0.5 KiB a job each
SOLVER_BYTES_PER_JOB = 1024
# what any file system a run writes in needs at the least: room for a few small files (bytes, inodes)
LEAST_ROOM = (1 << 20, 64)


def option_value(argv: list[str], name: str, bare: str | None = None) -> str | None:
    """The value of option ``name`` in ``argv`` (``--name X``, ``--name=X``); ``bare`` when given without one."""
    for i, a in enumerate(argv):
        if a.startswith(f"{name}="):
            return a.split("=", 1)[1]
        if a == name:
            nxt = argv[i + 1] if i + 1 < len(argv) else ""
            return nxt if nxt and not nxt.startswith("-") else bare
    return None


def free_space_problems(plan: Plan, argv: list[str], conda_prefix: str | os.PathLike | None = None) -> list[str]:
    """A sentence for each file system this run writes in, outside what its jobs check, with too little
    room to start. Snakemake's ILP scheduler dies with a traceback when its temp folder is full."""
    least_bytes, least_inodes = LEAST_ROOM
    tmp_fix = (
        "free room there, or point TMPDIR and TMP (pulp reads TMP first) at a folder on a file system with room "
        "(`export TMPDIR=/scratch/$USER/tmp TMP=/scratch/$USER/tmp`)"
    )
    needs = []  # (the folder's role, the folder, bytes, inodes, what is written there, what to do)
    if option_value(argv, "--scheduler", "ilp") in (None, "ilp"):
        n = sum(job_counts(plan).values())  # as many as Snakemake's scheduler may weigh at once
        solver = least_bytes + SOLVER_BYTES_PER_JOB * n
        needs.append(
            (
                "the temp folder of Snakemake's scheduler (TMP, else TMPDIR)",
                Path(os.environ.get("TMP") or os.environ.get("TMPDIR") or "/tmp"),  # pulp's order, not Python's
                solver,
                16,
                f"its solver's files go there before a job starts (about {human_bytes(solver)} for {n} jobs)",
                f"{tmp_fix}, or run with `--scheduler greedy`, which writes nothing there",
            )
        )
    report = option_value(argv, "--report", "report.html")
    if report is not None:  # the report holds every figure and table it shows, base64-encoded: a third more
        shown = sum(os.path.getsize(t) for t in plan.targets() if os.path.isfile(t))
        report_bytes = least_bytes + shown * 4 // 3
        needs.append(
            (
                "the folder of --report",
                Path(report).parent,
                report_bytes,
                least_inodes,
                f"the report, about {human_bytes(report_bytes)}, is written there",
                "free room there, or write the report elsewhere",
            )
        )
    least = [
        (
            "the temp folder (TMPDIR)",
            os.environ.get("TMPDIR") or tempfile.gettempdir(),  # (Python falls back to /tmp when it is full)
            "the jobs' temporary files and GPU locks go there",
            tmp_fix,
        ),
        (
            "the experiment folder",
            plan.paths.root,
            "every result and log of this run goes there",
            "free room there, or make results/ a link to a file system with room",
        ),
        (".snakemake/", ".snakemake", "Snakemake records every job there", "free room on that file system"),
        (
            "--shadow-prefix",
            option_value(argv, "--shadow-prefix"),
            "the jobs' shadow folders go there",
            "free room there, or give it a folder with room",
        ),
        (
            "the conda prefix",
            conda_prefix,
            "conda makes the jobs' environment there",
            "free room there, or give --conda-prefix a folder with room",
        ),
    ] + [
        (
            env,
            os.environ.get(env),
            "the run's locks go there",
            f"free room there, or set {env} to a local folder with room",
        )
        for env in (LOCK_DIR_ENV, GPU_LOCK_DIR_ENV)
    ]
    needs += [(n, Path(f).expanduser(), least_bytes, least_inodes, w, x) for n, f, w, x in least if f]
    out, seen = [], set()
    for name, folder, need_bytes, need_inodes, why, fix in needs:
        r = room(folder)
        if r is None or r.device in seen:
            continue
        no_inodes = r.inodes > 0 and r.inodes_free < need_inodes
        if r.free >= need_bytes and not no_inodes:
            continue
        seen.add(r.device)
        short = (
            f"no free inodes ({r.inodes_free} of {r.inodes}; each file takes one: `df -i {folder}`), though "
            f"{human_bytes(r.free)} of space is free"
            if no_inodes
            else f"{human_bytes(r.free)} free (`df -h {folder}`)"
        )
        out.append(f"no room to run: {name}, {folder}, has {short}, and {why}: {fix}; then run again")
    return out
