"""A clear word when ``snakemake --report`` is asked of an experiment that has not run (without
``--configfile`` Snakemake reports ``results/default/`` and fails on its first missing figure), or
whose staged files are not what was published (the report would show other numbers).
"""

from __future__ import annotations

from pathlib import Path

from ..core import published
from ..core.digests import sha256_file
from ..core.errors import ConfigError


def report_requested(argv: list[str]) -> bool:
    """Whether this Snakemake was started with ``--report`` (the Snakefile cannot ask Snakemake)."""
    return any(a == "--report" or a.startswith("--report=") for a in argv)


def check_report_inputs(plan, configfile, argv: list[str]) -> None:
    """Under ``--report``: every file the report shows must exist, else one error naming the config."""
    if not report_requested(argv):
        return
    missing = [t for t in plan.targets() if not Path(t).exists()]
    if not missing:
        problem = _published_problem(plan)
        if problem:
            raise ConfigError(
                f"--report: {problem}. Run `snakemake --configfile {configfile}` first (it publishes the set "
                "again), then the report"
            )
        return
    root = Path(plan.paths.root)
    others = sorted(p.parent.name for p in root.parent.glob("*/scores.parquet") if p.parent != root)
    here = f" (experiments with results here: {', '.join(others)})" if others else ""
    raise ConfigError(
        f"--report: experiment {plan.experiment!r} (from {configfile}) has not finished here: {len(missing)} of the "
        f"report's {len(plan.targets())} files are missing (e.g. {missing[0]}). The report covers the experiment "
        f"of the config given with --configfile{here}. Run `snakemake --configfile <that config> --report "
        f"{root.parent}/<experiment>/report.html`, or run this experiment first."
    )


def _published_problem(plan) -> str | None:
    """Why the staged files the report would show are not what is published, or None."""
    root = Path(plan.paths.root)
    rels = plan.published_rels()
    state = published.inspect(root, rels)
    if not state.whole:
        what = (state.damaged + state.incomplete)[0] if state.layout == "versioned" else "it has no publish record"
        return f"the published results of experiment {plan.experiment!r} are not whole ({what})"
    for rel in rels:
        staged = Path(plan.paths.staged(str(root / rel)))
        if not staged.is_file() or sha256_file(staged) != state.record["files"][rel]["sha256"]:
            return (
                f"the report shows the staged results, and {staged} differs from the published {root / rel} (a "
                "run that did not finish, or a file changed by hand)"
            )
    return None
