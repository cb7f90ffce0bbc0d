"""The answer in one sentence per in-domain set: how many OOD pairs got which verdict, from the
agreement table (``agreement.csv``), said alike by ``oodcorr analyse``, the workflow's last line and
the HTML report:

    in-domain mnli: 21 pairs, a sign for 8: 1 negative in nearly every model; 4 positive on
    average; ...; 3 unresolved (16 models); about the tasks; noise-limited by wnli
    (reliability 0.23, 3 pairs)

The ladder's words live here, each once (:data:`VERDICTS`, strongest first, and the words they are
made of). Stdlib only, so the launch layer, which prints the workflow's last line, reads it too.
"""

from __future__ import annotations

import csv
import math
import re
import statistics
from collections import Counter
from collections.abc import Callable
from pathlib import Path

# ---- the ladder's words ----------------------------------------------------------------------
# a verdict joins what a pair's answer says about the sign and how the models differ (:func:`verdict_words`)
POSITIVE, NEGATIVE = "positive", "negative"
SIGNS = (POSITIVE, NEGATIVE)
NEARLY_EVERY = "in nearly every model"
ON_AVERAGE = "on average"
SIGN_WORDS = (NEARLY_EVERY, ON_AVERAGE)
SIGN_REVERSAL = "sign reversal"
MODELS_DIFFER = "models differ"
NEAR_ZERO = "near zero"
SPREADS = (SIGN_REVERSAL, MODELS_DIFFER, NEAR_ZERO)
AGREE_NEAR_ZERO = f"agree {NEAR_ZERO}"  # the verdict of a pair near zero with no sign stated
# the verdicts that state nothing: no sign and no spread shown; too few models; no finite value
UNRESOLVED = "unresolved"
TOO_FEW_MODELS = "fewer than 2 models tested"
NO_DATA = "no data"
# a pair the data cannot resolve because a testset's series is mostly item noise
# (oodcorr.analysis.across.measured_answer)
NOISE_LIMITED_VERDICT = "noise-limited"
NOISE_LIMITED_BY = f"{NOISE_LIMITED_VERDICT} by"  # what precedes the testsets that leave pairs noise-limited
# the verdicts that become noise-limited where a testset of the pair is mostly item noise
NOISE_LIMITABLE = (UNRESOLVED, TOO_FEW_MODELS)
NO_ANSWER = (NOISE_LIMITED_VERDICT, UNRESOLVED, TOO_FEW_MODELS, NO_DATA)
# beside a verdict (agreement.csv's ``form``): the straight line, the check of the curve the answer
# reads, states another sign, or another spread, for the pair (oodcorr.analysis.cell.form_check)
DEPENDS_ON_FORM = "depends on the form"
# strongest first: a verdict's place is that of the first of these it holds
STRENGTH = (SIGN_REVERSAL, NEARLY_EVERY, ON_AVERAGE, MODELS_DIFFER, AGREE_NEAR_ZERO, *NO_ANSWER)
# the conclusion of one cell (one model's pooled r and its interval; partial_correlations.csv's
# ``conclusion``): its sign where the interval excludes 0, near zero where it lies inside the
# near-zero band, else unresolved ("" where r is not finite)
CELL_CONCLUSIONS = (POSITIVE, NEGATIVE, NEAR_ZERO, UNRESOLVED)
NAMED = 5  # the answer's line names at most this many testsets that leave pairs noise-limited


def verdict_order(verdict: str) -> tuple:
    """A sort key: stronger first; positive before negative; without a spread before with one."""
    place = next((i for i, w in enumerate(STRENGTH) if w in verdict), len(STRENGTH))
    return (place, NEGATIVE in verdict, "," in verdict, verdict)


def verdict_words(direction: str, spread: str) -> str:
    """The verdict of a pair from its two facts: ``direction`` ("negative in nearly every model",
    "positive on average" or "") and ``spread`` (one of :data:`SPREADS` or "")."""
    if direction and spread:
        return f"{spread}, {direction}" if spread == SIGN_REVERSAL else f"{direction}, {spread}"
    if direction:
        return direction
    return {NEAR_ZERO: AGREE_NEAR_ZERO, "": UNRESOLVED}.get(spread, spread)


def _all_verdicts() -> tuple[str, ...]:
    out = [verdict_words(f"{s} {ON_AVERAGE}", SIGN_REVERSAL) for s in SIGNS] + [SIGN_REVERSAL]
    for rung in (NEARLY_EVERY, ON_AVERAGE):
        for spread in (MODELS_DIFFER, NEAR_ZERO, ""):
            if rung == NEARLY_EVERY and spread == NEAR_ZERO:
                continue
            out += [verdict_words(f"{s} {rung}", spread) for s in SIGNS]
    return tuple(sorted(out + [MODELS_DIFFER, AGREE_NEAR_ZERO, *NO_ANSWER], key=verdict_order))


VERDICTS = _all_verdicts()  # every verdict, strongest first (:func:`verdict_order`)


def verdict_rank(word: str) -> int:
    """A verdict's place in :data:`VERDICTS` (0: the strongest); an unknown word ranks last."""
    return VERDICTS.index(word) if word in VERDICTS else len(VERDICTS)


def states_a_sign(verdict: str) -> bool:
    """Whether a verdict states the sign (in nearly every model, or on average)."""
    return any(w in verdict for w in SIGN_WORDS)


def read_agreement(path: str | Path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def as_float(row: dict, key: str) -> float:
    """A number of an agreement row (text or a number), NaN where it holds none."""
    try:
        return float(row.get(key))
    except (TypeError, ValueError):
        return math.nan


def as_int(row: dict, key: str) -> int:
    """A count of an agreement row, 0 where it holds none."""
    v = as_float(row, key)
    return int(v) if math.isfinite(v) else 0


def every_run_sign(row: dict) -> str:
    """The sign that each model's own run of a pair without a statement across models finds
    significant; "" where the runs do not all agree, or the verdict states something or is noise-limited."""
    n = as_int(row, "n_models")
    if str(row.get("verdict")) not in NOISE_LIMITABLE or n < 1:
        return ""
    return next((s for s in SIGNS if as_int(row, f"n_sig_{s}") == n), "")


def _median(values: list[float]) -> float:
    finite = [v for v in values if math.isfinite(v)]
    return statistics.median(finite) if finite else math.nan


def reliabilities(rows: list[dict]) -> dict[str, tuple[float, float]]:
    """Each testset's reliability (the share of its residual series' variance across checkpoints
    that is not item noise) and its interval's low end, from the agreement rows: {testset: (estimate,
    low end)}, the median over the rows that name it; NaN where not known."""
    seen: dict[str, tuple[list[float], list[float]]] = {}
    for r in rows:
        for side, name in (("x", r.get("x")), ("y", r.get("y")), ("in_domain", r.get("in_domain"))):
            if name is None or f"reliability_{side}" not in r:
                continue
            est, low = seen.setdefault(str(name), ([], []))
            est.append(as_float(r, f"reliability_{side}"))
            low.append(as_float(r, f"reliability_{side}_low"))
    return {name: (_median(est), _median(low)) for name, (est, low) in seen.items()}


# a reliability estimate below 0 is not a share: the item noise estimated exceeds the series' variance
NOISE_EXCEEDS = "item noise exceeds the series' variance"


def reliability_text(est: float, low: float) -> str:
    """A reliability in words, never a share outside [0, 1]; else the low end its size bounds it by."""
    if math.isfinite(est):
        if est < 0:
            return NOISE_EXCEEDS
        return f"{est:.2f}" if est <= 1 else "above 1 (item noise estimated below 0)"
    if math.isfinite(low):
        return f"at least {max(low, 0.0):.2f}"
    return "unknown"


def interval_text(est: float, lo: float, hi: float) -> str:
    """An estimate and its interval in words: "+0.42 [+0.10, +0.65]"."""
    if math.isfinite(lo) and math.isfinite(hi):
        return (f"{est:+.2f} " if math.isfinite(est) else "no estimate ") + f"[{lo:+.2f}, {hi:+.2f}]"
    return f"{est:+.2f}" if math.isfinite(est) else "n/a"


# a testset named in agreement.csv's noise_limited: "wnli (reliability 0.23), mnli (its variation ...)"
_LIMITING = re.compile(r"(?:^|, )(.+?) \((?:reliability|its variation)[^)]*\)")


def about(rows: list[dict]) -> str:
    """What the answer of ``rows`` speaks of (their ``about``): the tasks, the observed scores, or the
    counts of each where the rows differ."""
    said = [a for a in (r.get("about") for r in rows) if isinstance(a, str) and a]
    if not said:
        return ""
    if len(set(said)) == 1:
        return f"about the {said[0]}"
    tasks = sum(a.startswith("tasks") for a in said)
    parts = [f"the tasks for {tasks} pair{'s' if tasks != 1 else ''}"] if tasks else []
    if len(said) - tasks:
        parts.append(f"the observed scores for {len(said) - tasks} (item noise unknown)")
    return "about " + ", ".join(parts)


def noise_clause(rows: list[dict]) -> str:
    """The testsets that leave pairs of ``rows`` noise-limited, most pairs first, with their reliability."""
    limiting: Counter = Counter()  # testset -> the noise-limited pairs it leaves so
    for r in rows:
        if str(r.get("verdict")) == NOISE_LIMITED_VERDICT:
            text = r.get("noise_limited")
            limiting.update({m.group(1) for m in _LIMITING.finditer(text if isinstance(text, str) else "")})
    if not limiting:
        return ""
    rel = reliabilities(rows)
    named = sorted(limiting, key=lambda n: (-limiting[n], n))
    parts = [
        f"{n} (reliability {reliability_text(*rel.get(n, (math.nan, math.nan)))}, "
        f"{limiting[n]} pair{'s' if limiting[n] != 1 else ''})"
        for n in named[:NAMED]
    ]
    more = f" and {len(named) - NAMED} more testsets" if len(named) > NAMED else ""
    return f"{NOISE_LIMITED_BY} " + ", ".join(parts) + more


RELIABILITIES_SAID = 12  # reliability_line names this many testsets, the least reliable first


def reliability_line(rows: list[dict], limit: float) -> str:
    """Each testset's reliability of one in-domain set's agreement rows in words, the least reliable
    first; ``limit``: :data:`oodcorr.analysis.items.measurement.NOISE_LIMITED`."""
    rel = {n: v for n, v in reliabilities(rows).items() if any(map(math.isfinite, v))}
    if not rel:
        return ""
    order = sorted(rel, key=lambda n: (rel[n][0] if math.isfinite(rel[n][0]) else rel[n][1], n))
    control = {str(r.get("in_domain")) for r in rows}
    shown = ", ".join(
        f"{n}{' (in-domain)' if n in control else ''} {reliability_text(*rel[n])}" for n in order[:RELIABILITIES_SAID]
    )
    more = f" and {len(order) - RELIABILITIES_SAID} more" if len(order) > RELIABILITIES_SAID else ""
    return (
        "each testset's reliability (the share of its residual series' variance across checkpoints that is not "
        f"item noise, pooled over the models; below {limit:g} a pair it is in can be noise-limited): {shown}{more}"
    )


def every_run_clause(rows: list[dict]) -> str:
    """Where too few models leave every pair without an answer, the pairs that each model's own run
    finds significant with the same sign, strongest consensus first. A fact about these runs, not a
    prediction: a noise-limited pair is never named (item noise that persists across checkpoints can
    make a run's own test significant)."""
    found = []
    for r in rows:
        sign = every_run_sign(r)
        if sign:
            strength = abs(as_float(r, "r_consensus"))
            found.append((-strength if math.isfinite(strength) else 0.0, f"{r.get('x')} × {r.get('y')} {sign}"))
    if not found:
        return ""
    found.sort()
    named = [text for _, text in found[:NAMED]]
    more = f" and {len(found) - NAMED} more" if len(found) > NAMED else ""
    n_models = max(as_int(r, "n_models") for r in rows)
    runs = "the model's run" if n_models == 1 else f"each of the {n_models} models' runs"
    return f"significant with one sign in {runs}: " + ", ".join(named) + more


def form_clause(rows: list[dict]) -> str:
    """How many pairs of ``rows`` depend on the form of the regression (their ``form``)."""
    n = sum(str(r.get("form")) == DEPENDS_ON_FORM for r in rows)
    if not n:
        return ""
    return f"{n} {'depends' if n == 1 else 'depend'} on the form (the straight line states otherwise: line_verdict)"


def reason_counts(rows: list[dict]) -> str:
    """The pairs of ``rows`` counted by the kind of their reason (its words before the first ": "),
    most first: "why: 2 models (12 pairs), item noise (3 pairs)"."""
    counts = Counter(
        str(r["reason"]).split(": ", 1)[0] for r in rows if isinstance(r.get("reason"), str) and r["reason"]
    )
    if not counts:
        return ""
    order = sorted(counts, key=lambda k: (-counts[k], k))
    return "why: " + ", ".join(f"{k} ({counts[k]} pair{'s' if counts[k] != 1 else ''})" for k in order)


def tallies(rows: list[dict], method: str, residualiser: str) -> list[tuple[str, str, str]]:
    """(in-domain set, pool group, sentence) for each panel of the consensus heatmaps."""
    chosen = [r for r in rows if str(r.get("method")) == method and str(r.get("residualiser")) == residualiser]
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in chosen:
        groups.setdefault((str(r.get("in_domain", "")), str(r.get("pool_group", ""))), []).append(r)
    out = []
    for (dom, group), rs in sorted(groups.items()):
        counts = Counter(str(r.get("verdict")) for r in rs)
        parts = [f"{counts[v]} {v}" for v in sorted(counts, key=verdict_order)]
        signed = sum(n for v, n in counts.items() if states_a_sign(v))
        n_models = max((as_int(r, "n_models_consensus") for r in rs), default=0)
        tested = max((as_int(r, "n_models") for r in rs), default=0)
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
        runs = every_run_clause(rs) if n_models <= 2 else ""
        measured = "".join(
            f"; {c}" for c in (runs, form_clause(rs), about(rs), noise_clause(rs), reason_counts(rs)) if c
        )
        sentence = f"in-domain {dom}{where}: {pairs}, a sign for {signed}: {'; '.join(parts)}{why}{measured}"
        out.append((dom, group, sentence))
    return out


def answer_lines(
    rows: list[dict],
    method: str,
    residualiser: str,
    analysis: str | Path,
    consensus_sets: list[str] | None = None,
    file_name: Callable[[str], str] = str,
) -> list[str]:
    """The sentences that name the answer's files under the analysis folder ``analysis`` and each tally.
    ``consensus_sets``: the in-domain sets that have a consensus heatmap (default: those with 2 or
    more models); ``file_name`` turns a set's name into its figures' file name."""
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
