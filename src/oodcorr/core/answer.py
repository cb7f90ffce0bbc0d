"""The answer in one sentence per in-domain set: how many OOD pairs got which verdict.

``oodcorr analyse``'s summary, the workflow's last line and the HTML report's landing text all
say it the same way, from the agreement table (``agreement.csv``; the verdicts of the ladder,
:data:`oodcorr.analysis.consensus.VERDICTS`), for the method and residualiser the heatmaps show:

    in-domain mnli: 21 pairs, a sign for 8: 1 negative in nearly every model; 4 positive on
    average; 2 negative on average; 1 positive on average, models differ; 6 models differ;
    1 agree near zero; 6 unresolved (16 models)

Stdlib only (``csv``), so the launch layer, which prints the workflow's last line, reads it too.
"""

from __future__ import annotations

import csv
from collections import Counter
from collections.abc import Callable
from pathlib import Path

# the ladder's words, strongest first: a verdict's place is that of the first word it holds
# (the order of oodcorr.analysis.consensus.VERDICTS; tests/core/test_answer.py checks it)
STRENGTH = (
    "sign reversal",
    "in nearly every model",
    "on average",
    "models differ",
    "agree near zero",
    "noise-limited",
    "unresolved",
    "fewer than 2 models tested",
    "no data",
)
SIGN_WORDS = ("in nearly every model", "on average")


def verdict_order(verdict: str) -> tuple:
    """A sort key that puts verdicts in the ladder's order (stronger first; positive before
    negative; a verdict without a spread before one with it)."""
    place = next((i for i, w in enumerate(STRENGTH) if w in verdict), len(STRENGTH))
    return (place, "negative" in verdict, "," in verdict, verdict)


def states_a_sign(verdict: str) -> bool:
    """Whether a verdict states the sign (in nearly every model, or on average)."""
    return any(w in verdict for w in SIGN_WORDS)


def read_agreement(path: str | Path) -> list[dict]:
    """The rows of an ``agreement.csv`` as text."""
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def _int(v) -> int:
    try:
        return int(float(v))
    except (TypeError, ValueError):
        return 0


def tallies(rows: list[dict], method: str, residualiser: str) -> list[tuple[str, str, str]]:
    """(in-domain set, pool group, sentence) for each panel of the consensus heatmaps: the pairs, how
    many have a sign stated, and each verdict's count in the ladder's order."""
    chosen = [r for r in rows if str(r.get("method")) == method and str(r.get("residualiser")) == residualiser]
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in chosen:
        groups.setdefault((str(r.get("in_domain", "")), str(r.get("pool_group", ""))), []).append(r)
    out = []
    for (dom, group), rs in sorted(groups.items()):
        counts = Counter(str(r.get("verdict")) for r in rs)
        parts = [f"{counts[v]} {v}" for v in sorted(counts, key=verdict_order)]
        signed = sum(n for v, n in counts.items() if states_a_sign(v))
        n_models = max((_int(r.get("n_models_consensus")) for r in rs), default=0)
        tested = max((_int(r.get("n_models")) for r in rs), default=0)
        if n_models == 2:
            why = (
                " (2 models: no further model can be predicted, so nothing is said of nearly every model; "
                "that needs 3 or more)"
            )
        elif max(n_models, tested) < 2:
            why = " (1 model: no consensus across models, which needs 2 or more)"
        else:
            why = f" ({n_models} models)"
        where = f" ({group})" if group not in ("", "all runs") else ""
        pairs = f"{len(rs)} pair{'s' if len(rs) != 1 else ''}"
        out.append((dom, group, f"in-domain {dom}{where}: {pairs}, a sign for {signed}: {'; '.join(parts)}{why}"))
    return out


def answer_lines(
    rows: list[dict],
    method: str,
    residualiser: str,
    analysis: str | Path,
    consensus_sets: list[str] | None = None,
    file_name: Callable[[str], str] = str,
) -> list[str]:
    """The sentences that name the answer's files (``agreement.csv``, the consensus heatmap and the
    forest plots of each in-domain set under the analysis folder ``analysis``) and each tally.
    ``consensus_sets``: the in-domain sets that have a consensus heatmap (default: those with 2 or
    more models in the table); ``file_name`` turns a set's name into its figures' file name."""
    a = str(analysis).rstrip("/")
    lines = []
    for dom, _group, sentence in tallies(rows, method, residualiser):
        has = (dom in consensus_sets) if consensus_sets is not None else "1 model:" not in sentence
        figs = (
            f"; consensus heatmap {a}/consensus/{file_name(dom)}.png, forest plots (why each pair) in "
            f"{a}/forest/{file_name(dom)}/"
            if has
            else "; no consensus heatmap"
        )
        lines.append(f"{sentence}{figs}")
    if not lines:
        lines.append(f"no pair of OOD testsets was analysed ({method}, {residualiser})")
    return [f"the answer, {a}/agreement.csv ({method}, {residualiser}): {lines[0]}", *lines[1:]]
