"""Why each pair got its verdict, and what would resolve it: agreement.csv's ``reason`` and ``way_on``,
read from the row's own numbers. A reason starts with its kind (one of :data:`KINDS`), by which the
answer counts the pairs.
"""

from __future__ import annotations

import math

from .answer import (
    AGREE_NEAR_ZERO,
    DEPENDS_ON_FORM,
    MODELS_DIFFER,
    NEARLY_EVERY,
    NO_DATA,
    NOISE_EXCEEDS,
    NOISE_LIMITED_VERDICT,
    ON_AVERAGE,
    SIGN_REVERSAL,
    TOO_FEW_MODELS,
    UNRESOLVED,
    as_float,
    as_int,
    every_run_sign,
)

# the kinds of reason, each the start of a reason (before ": ")
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


def _text(row: dict, key: str) -> str:
    v = row.get(key)
    return v if isinstance(v, str) else ""


def _p(v: float) -> str:
    """A corrected p-value in brackets, "" where there is none."""
    if not math.isfinite(v):
        return ""
    return f" (p {f'{v:.2g}' if v >= 1e-3 else f'{v:.1e}'} after correction)"


def _span(row: dict, lo: str, hi: str) -> str:
    a, b = as_float(row, lo), as_float(row, hi)
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


def _noise_sides(row: dict, limit: float) -> list[tuple[str, str]]:
    """(testset, its item noise in words) for each testset of the pair below the reliability ``limit``."""
    out = []
    for side, name in (("x", row.get("x")), ("y", row.get("y")), ("in_domain", row.get("in_domain"))):
        est, low = as_float(row, f"reliability_{side}"), as_float(row, f"reliability_{side}_low")
        where = "in-domain " if side == "in_domain" else ""
        if math.isfinite(est) and est < limit:
            said = NOISE_EXCEEDS if est < 0 else f"item noise is {1 - est:.0%} of its series' variance"
            out.append((f"{where}{name}", f"{where}{name}'s {said} (reliability below {limit:g})"))
        elif not math.isfinite(est) and math.isfinite(low) and low < limit:
            out.append(
                (
                    f"{where}{name}",
                    f"{where}{name}'s item noise may be up to {1 - max(low, 0.0):.0%} of its series' variance "
                    "(bounded by its size alone)",
                )
            )
    if not out and _text(row, "noise_limited"):
        out.append((str(row.get("in_domain")), _text(row, "noise_limited")))
    return out


def _no_sign(row: dict, n: int, alpha: float) -> tuple[str, str]:
    """An unresolved pair of 2 models or more: why, and what would resolve it."""
    ci = _span(row, "ci_low_consensus", "ci_high_consensus")
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
    if lo > 0 or hi < 0:  # the interval (at the level, uncorrected) excludes 0; the corrected p-value does not
        across = f"the correction across the table's {pairs} pairs" if pairs > 1 else "the correction across pairs"
        mean = f"the consensus interval {ci} excludes 0 only before {across}{_p(as_float(row, 'p_mean_adj'))}"
        corrected = True
    else:
        mean = f"the consensus interval {ci} includes 0{_p(as_float(row, 'p_mean_adj'))}"
        corrected = False
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


def _signed(row: dict, verdict: str, n: int) -> tuple[str, str]:
    """A verdict that states a sign, a spread or near zero: why, and what remains."""
    if verdict.startswith(SIGN_REVERSAL):
        reason = f"{REVERSED}: {_text(row, 'reversal') or 'two models'}, each significant"
        reason += _p(as_float(row, "p_reversal_adj"))
        return reason, "read each model's correlation (by_model): the sign depends on the model; more models show which"
    if NEARLY_EVERY in verdict:
        reason = (
            f"{SETTLED_FURTHER}: across {n} models the tolerance bounds "
            f"{_span(row, 'tol_low_consensus', 'tol_high_consensus')} exclude 0"
            f"{_p(as_float(row, 'p_generalises_adj'))}"
        )
        way = SETTLED
    elif ON_AVERAGE in verdict:
        reason = (
            f"{SETTLED_AVERAGE}: {_span(row, 'ci_low_consensus', 'ci_high_consensus')} across {n} models"
            f"{_p(as_float(row, 'p_mean_adj'))}; "
        )
        if n == 2:
            reason += "2 models: a statement about a further model needs 3 or more"
            way = "a third model, for a statement about a further model"
        else:
            reason += (
                f"a further model may still have the other sign (tolerance bounds "
                f"{_span(row, 'tol_low_consensus', 'tol_high_consensus')})"
            )
            way = "more models or more runs per model (narrower tolerance bounds)"
    elif verdict == AGREE_NEAR_ZERO:
        reason = (
            f"{NEAR}: across {n} models a further model is expected inside the near-zero band "
            f"(prediction interval {_span(row, 'pi_low_consensus', 'pi_high_consensus')})"
        )
        return reason, SETTLED
    else:  # models differ, no sign
        reason, way = "", ""
    if MODELS_DIFFER in verdict:
        i2 = as_float(row, "i2_models")
        share = f" (I² {i2:.0%})" if math.isfinite(i2) else ""
        differ = f"the models differ beyond their runs' variation{share}{_p(as_float(row, 'p_heterogeneity_adj'))}"
        if not reason:
            return (
                f"{DIFFER}: {differ} across {n} models, with no shared sign",
                "read each model's correlation (by_model); more models show what the difference follows",
            )
        reason += f"; {differ}"
        way = "read each model's correlation (by_model)" + ("" if way == SETTLED else f"; {way}")
    return reason, way


def verdict_reason(row: dict, alpha: float, limit: float) -> tuple[str, str]:
    """(reason, way on) of one agreement row, for the significance level ``alpha`` and the reliability
    below which a pair can be noise-limited ``limit``."""
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
        sides = _noise_sides(row, limit)
        ci = _span(row, "ci_low_consensus", "ci_high_consensus")
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
    return _signed(row, verdict, n)
