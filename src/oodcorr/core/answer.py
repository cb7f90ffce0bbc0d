"""The verdict ladder's words (each once) and the answer in one sentence per in-domain set, from
``agreement.csv``: said alike by ``oodcorr analyse``, the workflow's last line and the HTML report.
"""

from __future__ import annotations

import csv
import math
import re
import statistics
from collections import Counter
from collections.abc import Callable
from pathlib import Path

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
UNRESOLVED = "unresolved"
TOO_FEW_MODELS = "fewer than 2 models tested"
NO_DATA = "no data"
NOISE_LIMITED_VERDICT = "noise-limited"
NOISE_LIMITED_BY = f"{NOISE_LIMITED_VERDICT} by"  # what precedes the testsets that leave pairs noise-limited
NOISE_LIMITABLE = (UNRESOLVED, TOO_FEW_MODELS)
NO_ANSWER = (NOISE_LIMITED_VERDICT, UNRESOLVED, TOO_FEW_MODELS, NO_DATA)
# agreement.csv's ``form`` where the straight line states another sign or spread than the curve
DEPENDS_ON_FORM = "depends on the form"
STRENGTH = (SIGN_REVERSAL, NEARLY_EVERY, ON_AVERAGE, MODELS_DIFFER, AGREE_NEAR_ZERO, *NO_ANSWER)
# partial_correlations.csv's ``conclusion`` of one model's pooled r ("" where r is not finite)
CELL_CONCLUSIONS = (POSITIVE, NEGATIVE, NEAR_ZERO, UNRESOLVED)
NAMED = 5  # the answer's line names at most this many testsets that leave pairs noise-limited


def verdict_order(verdict: str) -> tuple:
    """A sort key: stronger first; positive before negative; without a spread before with one."""
    place = next((i for i, w in enumerate(STRENGTH) if w in verdict), len(STRENGTH))
    return (place, NEGATIVE in verdict, "," in verdict, verdict)


def verdict_words(direction: str, spread: str) -> str:
    """The verdict of a pair: ``direction`` ("negative in nearly every model", ...) and ``spread`` may be ""."""
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
    return VERDICTS.index(word) if word in VERDICTS else len(VERDICTS)


def states_a_sign(verdict: str) -> bool:
    return any(w in verdict for w in SIGN_WORDS)


def read_agreement(path: str | Path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def as_float(row: dict, key: str) -> float:
    try:
        return float(row.get(key))
    except (TypeError, ValueError):
        return math.nan


def as_int(row: dict, key: str) -> int:
    v = as_float(row, key)
    return int(v) if math.isfinite(v) else 0


def _text(row: dict, key: str) -> str:
    v = row.get(key)
    return v if isinstance(v, str) else ""


def every_run_sign(row: dict) -> str:
    """The sign every model's own run finds significant, for a pair whose verdict states nothing; else ""."""
    n = as_int(row, "n_models")
    if str(row.get("verdict")) not in NOISE_LIMITABLE or n < 1:
        return ""
    return next((s for s in SIGNS if as_int(row, f"n_sig_{s}") == n), "")


def _median(values: list[float]) -> float:
    finite = [v for v in values if math.isfinite(v)]
    return statistics.median(finite) if finite else math.nan


def reliabilities(rows: list[dict]) -> dict[str, tuple[float, float]]:
    """{testset: (reliability, its interval's low end)}, the median over the rows naming it (NaN: unknown)."""
    seen: dict[str, tuple[list[float], list[float]]] = {}
    for r in rows:
        for side, name in (("x", r.get("x")), ("y", r.get("y")), ("in_domain", r.get("in_domain"))):
            if name is None or f"reliability_{side}" not in r:
                continue
            est, low = seen.setdefault(str(name), ([], []))
            est.append(as_float(r, f"reliability_{side}"))
            low.append(as_float(r, f"reliability_{side}_low"))
    return {name: (_median(est), _median(low)) for name, (est, low) in seen.items()}


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


def _first(texts: list[str], n: int, what: str = "") -> str:
    return ", ".join(texts[:n]) + (f" and {len(texts) - n} more{what}" if len(texts) > n else "")


def about(rows: list[dict]) -> str:
    """What the answer of ``rows`` speaks of (their ``about``), counted where the rows differ."""
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
            limiting.update({m.group(1) for m in _LIMITING.finditer(_text(r, "noise_limited"))})
    if not limiting:
        return ""
    rel = reliabilities(rows)
    named = sorted(limiting, key=lambda n: (-limiting[n], n))
    parts = [
        f"{n} (reliability {reliability_text(*rel.get(n, (math.nan, math.nan)))}, "
        f"{limiting[n]} pair{'s' if limiting[n] != 1 else ''})"
        for n in named
    ]
    return f"{NOISE_LIMITED_BY} " + _first(parts, NAMED, " testsets")


def reliability_line(rows: list[dict], limit: float) -> str:
    """Each testset's reliability in words, the least reliable first (12 at most); ``limit``:
    :data:`oodcorr.analysis.items.measurement.NOISE_LIMITED`."""
    rel = {n: v for n, v in reliabilities(rows).items() if any(map(math.isfinite, v))}
    if not rel:
        return ""
    order = sorted(rel, key=lambda n: (rel[n][0] if math.isfinite(rel[n][0]) else rel[n][1], n))
    control = {str(r.get("in_domain")) for r in rows}
    shown = _first([f"{n}{' (in-domain)' if n in control else ''} {reliability_text(*rel[n])}" for n in order], 12)
    return (
        "each testset's reliability (the share of its residual series' variance across checkpoints that is not "
        f"item noise, pooled over the models; below {limit:g} a pair it is in can be noise-limited): {shown}"
    )


def every_run_clause(rows: list[dict]) -> str:
    """The pairs that each model's own run finds significant with the same sign, strongest consensus
    first; never a noise-limited pair (item noise persisting across checkpoints can make a run significant)."""
    found = []
    for r in rows:
        sign = every_run_sign(r)
        if sign:
            strength = abs(as_float(r, "r_consensus"))
            found.append((-strength if math.isfinite(strength) else 0.0, f"{r.get('x')} × {r.get('y')} {sign}"))
    if not found:
        return ""
    found.sort()
    n_models = max(as_int(r, "n_models") for r in rows)
    runs = "the model's run" if n_models == 1 else f"each of the {n_models} models' runs"
    return f"significant with one sign in {runs}: " + _first([text for _, text in found], NAMED)


def reason_counts(rows: list[dict]) -> str:
    """The pairs counted by the kind of their reason, most first: "why: 2 models (12 pairs), ..."."""
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
        forms = sum(str(r.get("form")) == DEPENDS_ON_FORM for r in rs)  # pairs that depend on the form
        form = f"{forms} {'depends' if forms == 1 else 'depend'} on the form" if forms else ""
        form += " (the straight line states otherwise: line_verdict)" if forms else ""
        measured = "".join(f"; {c}" for c in (runs, form, about(rs), noise_clause(rs), reason_counts(rs)) if c)
        sentence = f"in-domain {dom}{where}: {pairs}, a sign for {signed}: {'; '.join(parts)}{why}{measured}"
        out.append((dom, group, sentence))
    return out


def answer_lines(
    rows: list[dict],
    method: str,
    residualiser: str,
    analysis: str | Path,
    consensus_sets: list[str],
    file_name: Callable[[str], str] = str,
) -> list[str]:
    """The sentences that name the answer's files under the analysis folder ``analysis`` and each tally;
    ``consensus_sets``: the in-domain sets with a consensus heatmap, ``file_name``: their figures' name."""
    a = str(analysis).rstrip("/")
    lines = []
    for dom, _group, sentence in tallies(rows, method, residualiser):
        figs = (
            f"; consensus heatmap {a}/consensus/{file_name(dom)}.png, forest plots (why each pair) in "
            f"{a}/forest/{file_name(dom)}/"
            if dom in consensus_sets
            else "; no consensus heatmap"
        )
        lines.append(f"{sentence}{figs}")
    if not lines:
        lines.append(f"no pair of OOD testsets was analysed ({method}, {residualiser})")
    return [f"the answer, {a}/agreement.csv ({method}, {residualiser}): {lines[0]}", *lines[1:]]


# ---- agreement.csv's ``reason`` (starting with one of :data:`KINDS` and ": ") and ``way_on`` --------
SETTLED_FURTHER = "the sign holds for a further model"
SETTLED_AVERAGE = "the consensus interval excludes 0"
REVERSED = "models of opposite sign"
DIFFER = "the models differ"
NEAR = "a further model near zero"
TWO_MODELS = "2 models"
SPANS_ZERO = "the consensus interval includes 0"
CORRECTED = "not significant after the correction across pairs"
UNCONFIRMED = "not confirmed by the corrected Pearson cell"
ONE_MODEL = "1 model"
NO_INTERVAL = "models without an interval"
ITEM_NOISE = "item noise"
NO_VALUE = "no finite correlation"
FORM = "the form decides"
KINDS = (
    SETTLED_FURTHER,
    SETTLED_AVERAGE,
    REVERSED,
    DIFFER,
    NEAR,
    TWO_MODELS,
    SPANS_ZERO,
    CORRECTED,
    UNCONFIRMED,
    ONE_MODEL,
    NO_INTERVAL,
    ITEM_NOISE,
    NO_VALUE,
    FORM,
)
SETTLED = "nothing to resolve"


def _p(row: dict, key: str) -> str:
    v = as_float(row, key)
    if not math.isfinite(v):
        return ""
    return f" (p {f'{v:.2g}' if v >= 1e-3 else f'{v:.1e}'} after correction)"


def _span(row: dict, bound: str) -> str:
    a, b = as_float(row, f"{bound}_low_consensus"), as_float(row, f"{bound}_high_consensus")
    return f"[{a:+.2f}, {b:+.2f}]" if math.isfinite(a) and math.isfinite(b) else "n/a"


def _with_runs(row: dict, reason: str, way: str) -> tuple[str, str]:
    """``reason`` and ``way``, saying so where each model's runs are 2 and their pooled row has no interval."""
    if as_int(row, "runs_per_model") == 2 and as_int(row, "models_without_pooled_interval") > 0:
        return (
            f"{reason}; only 2 runs per model: no pooled interval of a model's own (between-run variation needs 3 "
            "runs)",
            f"{way}; --pool-two-runs fixed-effect (assumes the runs share one correlation) or a third run per model",
        )
    return reason, way


def _no_sign(row: dict, n: int, alpha: float) -> tuple[str, str]:
    """An unresolved pair of 2 models or more: why, and what would resolve it."""
    ci = _span(row, "ci")
    sign = every_run_sign(row)
    runs_said = f"; yet each model's own run finds it significant and {sign}" if sign else ""
    about = _text(row, "about")
    if "checked against" in about and min(as_float(row, "p_mean_adj"), as_float(row, "p_heterogeneity_adj")) < alpha:
        twin = about.split("checked against ", 1)[1].rstrip(")")
        return (
            f"{UNCONFIRMED}: this cell's statement is not made by the corrected {twin} cell of the same pair",
            f"read the {twin} row of this pair (its item noise is corrected)",
        )
    lo, hi = as_float(row, "ci_low_consensus"), as_float(row, "ci_high_consensus")
    pairs = as_int(row, "family_size")
    corrected = lo > 0 or hi < 0  # the interval (at the level, uncorrected) excludes 0; the corrected p does not
    if corrected:
        across = f"the correction across the table's {pairs} pairs" if pairs > 1 else "the correction across pairs"
        mean = f"the consensus interval {ci} excludes 0 only before {across}{_p(row, 'p_mean_adj')}"
    else:
        mean = f"the consensus interval {ci} includes 0{_p(row, 'p_mean_adj')}"
    if n == 2:
        reason = f"{TWO_MODELS}: a statement about a further model needs 3 or more, and {mean}{runs_said}"
        way = "a third model" + (" (the runs already agree on the sign)" if sign else "") + "; or more runs per model"
    else:
        kind = CORRECTED if corrected else SPANS_ZERO
        reason = f"{kind}: across {n} models {mean}, and the models do not differ significantly{runs_said}"
        way = "more runs or checkpoints per model (narrower intervals), or more models (a narrower consensus)"
    reason, way = _with_runs(row, reason, way)
    if about.startswith("observed"):
        way += "; --items N (or an n column) to know each testset's item noise"
    return reason, way


def verdict_reason(row: dict, alpha: float, limit: float) -> tuple[str, str]:
    """(reason, way on) of one agreement row; ``limit``: the reliability below which a pair can be noise-limited."""
    reason, way = _verdict_reason(row, alpha, limit)
    if str(row.get("form")) != DEPENDS_ON_FORM:
        return reason, way
    line = _text(row, "line_verdict") or "n/a"
    return (
        f"{reason}; {FORM}: the straight line answers '{line}' (the verdict is the curve's)",
        f"{way}; look at the scatter figure (each run's curve and line), or add checkpoints",
    )


def _verdict_reason(row: dict, alpha: float, limit: float) -> tuple[str, str]:
    verdict = str(row.get("verdict"))
    n = as_int(row, "n_models_consensus")
    tested = as_int(row, "n_models")
    if verdict == NO_DATA:
        note = _text(row, "note")
        return (
            f"{NO_VALUE}: no model's runs gave a value" + (f" ({note})" if note else ""),
            "read the note and partial_correlations.csv's run rows: longer series (more checkpoints), "
            "or testsets that do not share items",
        )
    if verdict == NOISE_LIMITED_VERDICT:
        # (testset, its item noise in words) for each testset of the pair below the reliability limit
        sides = []
        for side, name in (("x", row.get("x")), ("y", row.get("y")), ("in_domain", row.get("in_domain"))):
            est, low = as_float(row, f"reliability_{side}"), as_float(row, f"reliability_{side}_low")
            where = "in-domain " if side == "in_domain" else ""
            if math.isfinite(est) and est < limit:
                said = NOISE_EXCEEDS if est < 0 else f"item noise is {1 - est:.0%} of its series' variance"
                said += f" (reliability below {limit:g})"
            elif not math.isfinite(est) and math.isfinite(low) and low < limit:
                said = (
                    f"item noise may be up to {1 - max(low, 0.0):.0%} of its series' variance (bounded by its "
                    "size alone)"
                )
            else:
                continue
            sides.append((f"{where}{name}", f"{where}{name}'s {said}"))
        if not sides and _text(row, "noise_limited"):
            sides.append((str(row.get("in_domain")), _text(row, "noise_limited")))
        ci = _span(row, "ci")
        shown = f"; the consensus interval {ci} may be that noise persisting across checkpoints" if ci != "n/a" else ""
        bounded = any("bounded by its size" in t for _, t in sides)
        way = f"more items for {', '.join(dict.fromkeys(n_ for n_, _ in sides)) or 'its testsets'} (a larger testset)"
        if bounded:
            way += "; per-item scores (lm-eval samples) give an estimate instead of a bound"
        return f"{ITEM_NOISE}: " + "; ".join(t for _, t in sides) + shown, way
    if verdict == TOO_FEW_MODELS:
        if tested >= 2:
            reason = (
                f"{NO_INTERVAL}: only {n} of {tested} models have a correlation with an interval, "
                "and a consensus needs 2" + (f" ({_text(row, 'note')})" if _text(row, "note") else "")
            )
            way = "longer series (more checkpoints) or more runs for the models left out"
        else:
            sign = every_run_sign(row)
            reason = f"{ONE_MODEL}: a consensus across models needs 2 or more" + (
                f"; this model's own run finds it significant and {sign}" if sign else ""
            )
            way = (
                "a second model (a third for a statement about a further model); this model's own answer "
                "is its pooled row in partial_correlations.csv"
            )
        return _with_runs(row, reason, way)
    if verdict == UNRESOLVED:
        return _no_sign(row, n, alpha)
    # a verdict that states a sign, a spread or near zero: why, and what remains
    if verdict.startswith(SIGN_REVERSAL):
        reason = f"{REVERSED}: {_text(row, 'reversal') or 'two models'}, each significant"
        reason += _p(row, "p_reversal_adj")
        return reason, "read each model's correlation (by_model): the sign depends on the model; more models show which"
    if NEARLY_EVERY in verdict:
        reason = f"{SETTLED_FURTHER}: across {n} models the tolerance bounds {_span(row, 'tol')} exclude 0"
        reason += _p(row, "p_generalises_adj")
        way = SETTLED
    elif ON_AVERAGE in verdict:
        reason = f"{SETTLED_AVERAGE}: {_span(row, 'ci')} across {n} models{_p(row, 'p_mean_adj')}; "
        if n == 2:
            reason += "2 models: a statement about a further model needs 3 or more"
            way = "a third model, for a statement about a further model"
        else:
            reason += f"a further model may still have the other sign (tolerance bounds {_span(row, 'tol')})"
            way = "more models or more runs per model (narrower tolerance bounds)"
    elif verdict == AGREE_NEAR_ZERO:
        reason = (
            f"{NEAR}: across {n} models a further model is expected inside the near-zero band "
            f"(prediction interval {_span(row, 'pi')})"
        )
        return reason, SETTLED
    else:  # models differ, no sign
        reason, way = "", ""
    if MODELS_DIFFER in verdict:
        i2 = as_float(row, "i2_models")
        share = f" (I² {i2:.0%})" if math.isfinite(i2) else ""
        differ = f"the models differ beyond their runs' variation{share}{_p(row, 'p_heterogeneity_adj')}"
        if not reason:
            return (
                f"{DIFFER}: {differ} across {n} models, with no shared sign",
                "read each model's correlation (by_model); more models show what the difference follows",
            )
        reason += f"; {differ}"
        way = "read each model's correlation (by_model)" + ("" if way == SETTLED else f"; {way}")
    return reason, way
