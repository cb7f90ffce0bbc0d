"""The answer in one sentence per in-domain set: how many OOD pairs got which verdict.

``oodcorr analyse``'s summary, the workflow's last line and the HTML report's landing text all
say it the same way, from the agreement table (``agreement.csv``; the verdicts of
:data:`oodcorr.analysis.consensus.VERDICTS`), for the method and residualiser the heatmaps show:

    in-domain mnli: 10 pairs: 0 generalise, 0 reverse, 10 unresolved (2 models: no further
    model can be predicted)

Stdlib only (``csv``), so the launch layer, which prints the workflow's last line, reads it too.
"""

from __future__ import annotations

import csv
from collections import Counter
from collections.abc import Callable
from pathlib import Path

# verdict -> the word counted; the first three are always said, the others where they occur
WORDS = {
    "generalises (positive)": "generalise",
    "generalises (negative)": "generalise",
    "sign reversal": "reverse",
    "unresolved": "unresolved",
    "models differ": "differ",
    "agree near zero": "agree near zero",
    "fewer than 2 models tested": "with fewer than 2 models",
    "no data": "without data",
}
ALWAYS = ("generalise", "reverse", "unresolved")


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
    """(in-domain set, pool group, sentence) for each panel of the consensus heatmaps."""
    chosen = [r for r in rows if str(r.get("method")) == method and str(r.get("residualiser")) == residualiser]
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in chosen:
        groups.setdefault((str(r.get("in_domain", "")), str(r.get("pool_group", ""))), []).append(r)
    out = []
    for (dom, group), rs in sorted(groups.items()):
        counts = Counter(WORDS.get(str(r.get("verdict")), str(r.get("verdict"))) for r in rs)
        signs = Counter(str(r.get("verdict")) for r in rs if str(r.get("verdict")).startswith("generalises"))
        extra = [w for w in dict.fromkeys(WORDS.values()) if w not in ALWAYS]
        order = [*ALWAYS, *extra, *sorted(w for w in counts if w not in WORDS.values())]
        parts = []
        for word in order:
            if word in ALWAYS or counts.get(word):
                text = f"{counts.get(word, 0)} {word}"
                if word == "generalise" and signs:
                    pos, neg = signs.get("generalises (positive)", 0), signs.get("generalises (negative)", 0)
                    text += f" ({pos} positive, {neg} negative)"
                parts.append(text)
        n_models = max((_int(r.get("n_models_consensus")) for r in rs), default=0)
        tested = max((_int(r.get("n_models")) for r in rs), default=0)
        if n_models == 2:
            why = " (2 models: no further model can be predicted; a verdict of generalises needs 3 or more)"
        elif max(n_models, tested) < 2:
            why = " (1 model: no consensus across models, which needs 2 or more)"
        else:
            why = f" ({n_models} models)"
        where = f" ({group})" if group not in ("", "all runs") else ""
        out.append(
            (
                dom,
                group,
                f"in-domain {dom}{where}: {len(rs)} pair{'s' if len(rs) != 1 else ''}: {', '.join(parts)}{why}",
            )
        )
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
