"""The published set checked against its record at the start of every run, and before ``snakemake
--report``: a clear word when the experiment has not run (without ``--configfile`` Snakemake reports
``results/default/`` and fails on its first missing figure), or its staged files are not what was published.
"""

from __future__ import annotations

from pathlib import Path

from ..core import published
from ..core.digests import sha256_file
from ..core.errors import ConfigError
from ..core.locks import EXPERIMENT, FolderInUse, hold
from ..planning.plan import Plan
from .free_space import option_value


def check_published(plan: Plan, change: bool) -> list[str]:
    """Warnings naming what of the published set is not as published; with ``change``, a damaged or
    incomplete set loses its marker."""
    root = Path(plan.paths.root)
    state = published.inspect(root, plan.published_rels())
    if state.layout == "none":
        return []
    out = []
    if state.damaged:
        more = f"; and {len(state.damaged) - 5} more" if len(state.damaged) > 5 else ""
        out.append(
            f"the published results of experiment {plan.experiment!r} are not what was published"
            + (f" ({published.describe(state.record)})" if state.record else "")
            + f": {'; '.join(state.damaged[:5])}{more}. This run publishes the set again from {plan.paths.staging}; "
            f"what was changed or added is kept under {root / published.PUBLISHED}/kept-*"
        )
    elif state.incomplete:
        out.append(
            f"the published results of experiment {plan.experiment!r} are incomplete: {'; '.join(state.incomplete)}. "
            f"Readers see {published.describe(state.record)}, whole and as published; this run publishes again"
        )
    if state.leftovers:
        out.append(f"{', '.join(state.leftovers)}: left by a publish that did not finish; the next publish removes it")
    marker = root / published.MARKER
    if (state.damaged or state.incomplete) and marker.exists():
        if not change:
            out.append(
                f"this command only looks, so it changes nothing in {root}: a run removes {marker} and publishes "
                "the set again (rule publish_results, which Snakemake does not list here)"
            )
            return out
        try:
            with hold(root, EXPERIMENT):
                marker.unlink(missing_ok=True)
        except FolderInUse as e:
            out.append(f"nothing is changed while another process writes the experiment: {e}")
    return out


def check_report_inputs(plan, configfile, argv: list[str]) -> None:
    """Under ``--report``: every file the report shows must exist, else one error naming the config."""
    if option_value(argv, "--report", "") is None:
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
        f"report's {len(plan.targets())} files are missing (e.g. {missing[0]}){here}. Run it first, or report another "
        f"one with its config: `snakemake --configfile <that config> --report {root.parent}/<experiment>/report.html`"
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
