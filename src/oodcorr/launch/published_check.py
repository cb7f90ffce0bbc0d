"""The published set checked against its record at the start of every run; a damaged or incomplete set
loses its marker, so that the run publishes it again.
"""

from __future__ import annotations

from pathlib import Path

from ..core import published
from ..core.locks import EXPERIMENT, FolderInUse, hold
from ..planning.plan import Plan


def check_published(plan: Plan, change: bool) -> list[str]:
    """The published set against its record: warnings naming what is not as published. In a run that
    may write (``change``), a damaged or incomplete set loses its marker so that this run publishes it again.
    """
    root = Path(plan.paths.root)
    state = published.inspect(root, plan.published_rels())
    if state.layout == "none":
        return []
    out = []
    if state.damaged:
        shown = "; ".join(state.damaged[:5]) + (
            f"; and {len(state.damaged) - 5} more" if len(state.damaged) > 5 else ""
        )
        out.append(
            f"the published results of experiment {plan.experiment!r} are not what was published"
            + (f" ({published.describe(state.record)})" if state.record else "")
            + f": {shown}. This run publishes the set again from {plan.paths.staging}; what was changed or added is "
            f"kept under {root / published.PUBLISHED}/kept-*"
        )
    elif state.incomplete:
        out.append(
            f"the published results of experiment {plan.experiment!r} are incomplete: {'; '.join(state.incomplete)}. "
            f"Readers see {published.describe(state.record)}, whole and as published; this run publishes again"
        )
    if state.leftovers:
        out.append(
            f"{', '.join(state.leftovers)}: left by a publish that did not finish (the published set is not "
            "affected); the next publish removes it"
        )
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
