"""A clear word when `snakemake --report` is asked of an experiment that has not run.

``snakemake --configfile X --report results/<experiment>/report.html`` reports the
experiment of the config given. Without ``--configfile`` that is the embedded default,
``results/default/``: asked after running another config, Snakemake used to print a
"Missing metadata" line per job of the default experiment and then fail on the first
missing figure. :func:`check_report_inputs` stops that at planning with one message
naming the config to pass.
"""

from __future__ import annotations

from pathlib import Path

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
