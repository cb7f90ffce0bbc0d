"""The range a score can take by its metric's name (a share also as a percentage, told by the values), and the
first score outside it, refused naming its line or row; a metric without a known range is only a number."""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd

from ...core.errors import DataError

# the ranges of lm-evaluation-harness's metrics by their names (``acc,none``: ``acc``) and of the workflow's
# own columns (oodcorr.jobs.metrics.COLUMNS)
SHARES = frozenset(
    {
        "acc",
        "acc_norm",
        "acc_mutual_info",
        "accuracy",
        "exact_match",
        "em",
        "exact",
        "f1",
        "macro_f1",
        "micro_f1",
        "precision",
        "recall",
        "ece",
        "accuracy_ci_low",
        "accuracy_ci_high",
        "pct_stereotype",
    }
)
CORRELATIONS = frozenset({"mcc"})  # Matthews' correlation coefficient: in [-1, 1]
NON_NEGATIVE = frozenset({"perplexity", "ppl", "word_perplexity", "byte_perplexity", "bits_per_byte", "bpb", "ter"})
# known names of metrics that may take any number: a loss, a log-likelihood (``number``: a user's own)
ANY_NUMBER = frozenset({"loss", "loglik", "logprob", "number"})
KNOWN = SHARES | CORRELATIONS | NON_NEGATIVE | ANY_NUMBER
# the harness writes these as shares, never percentages (its squad-style ``exact`` and ``f1``,
# and a user's table, may be either: told by the values, :func:`out_of_range`)
LMEVAL_SHARES_ONLY = frozenset({"acc", "acc_norm", "acc_mutual_info", "exact_match"})


def metric_range(metric: str) -> tuple[float, float] | None:
    """The range of a metric by its name (a filter after a comma and case ignored); None for one unknown."""
    name = str(metric).split(",", 1)[0].strip().lower()
    ranges = ((SHARES, (0.0, 1.0)), (CORRELATIONS, (-1.0, 1.0)), (NON_NEGATIVE, (0.0, math.inf)))
    return next((rng for names, rng in ranges if name in names), None)


def out_of_range(
    scores: pd.DataFrame, metric: str, *, percent: bool = True
) -> tuple[object, object, float, str] | None:
    """(row, column, value, the sentence's end) of the first score outside its metric's range, or None."""
    v = scores.apply(lambda col: pd.to_numeric(col, errors="coerce")).astype(float)
    if (rng := metric_range(metric)) is None:
        return None
    (lo, hi), how = rng, ""
    flat = v.to_numpy().ravel()
    flat = flat[np.isfinite(flat)]
    if percent and hi != math.inf and len(flat):
        # a range below zero (a correlation) is told by the size of its values; a share's by the values
        median = float(np.median(np.abs(flat) if lo < 0 else flat))
        how = f"shares: their median is {median:.3g}"
        if median > 1:
            lo, hi, how = lo * 100, hi * 100, f"percentages: their median is {median:.3g}"
    for col in v.columns:
        x = v[col]
        bad = np.isfinite(x) & ((x < lo) | (x > hi))
        if bad.any():
            i = x.index[bad.to_numpy()][0]
            told = f" (the scores are {how})" if how else ""
            return i, col, float(x[i]), f"outside [{lo:g}, {hi:g}], the range of {metric.split(',', 1)[0]!r}{told}"
    return None


def check_known(metric: str) -> str:
    """``metric`` if it is a name :data:`KNOWN` (case ignored), else a :class:`DataError` listing them:
    a name this does not know has no range to check, so a typo would pass unseen."""
    if str(metric).strip().lower() in KNOWN:
        return metric
    raise DataError(
        f"--metric: {metric!r} is no metric this knows; the known ones are: shares (in [0, 1], or percentages) "
        f"{', '.join(sorted(SHARES))}; in [-1, 1] {', '.join(sorted(CORRELATIONS))}; not negative "
        f"{', '.join(sorted(NON_NEGATIVE))}; any number {', '.join(sorted(ANY_NUMBER))} ('number' for a metric of "
        "your own)"
    )


# a column's metric told by the end of its name (after the last '/'), where that is unambiguous: a
# tracker's names such as eval/downstream/arc_easy_acc, eval/c4_en/CrossEntropyLoss, eval/pile_bpb
_NAME_METRICS = (
    (re.compile(r"(?:^|[_\-/])(?:acc|accuracy|acc_norm|len_norm)$", re.IGNORECASE), "acc"),
    (re.compile(r"(?:^|[_\-/])f1$", re.IGNORECASE), "f1"),
    (re.compile(r"loss$", re.IGNORECASE), "loss"),
    (re.compile(r"(?:^|[_\-/])bpb$|bits_per_byte$", re.IGNORECASE), "bpb"),
    (re.compile(r"(?:^|[_\-/])(?:ppl|perplexity)$", re.IGNORECASE), "perplexity"),
)


def guess_metric(column: str) -> str | None:
    """The metric a column's name says (:data:`_NAME_METRICS`), or None where it says none or several."""
    said = {metric for pattern, metric in _NAME_METRICS if pattern.search(str(column))}
    return said.pop() if len(said) == 1 else None


def check_columns(values: pd.DataFrame, metrics: dict, source: str, where: str, remedy: str) -> None:
    """One :class:`DataError` naming every column of ``values`` with a score outside the range of its metric."""
    bad = []
    for col in values.columns:
        got = out_of_range(values[[col]], metrics[col])
        if got is not None:
            i, _, value, why = got
            bad.append(f"column {col!r}, {where} {i}: score {value:g} is {why}")
    if bad:
        many = f"{len(bad)} columns hold a score outside their metric's range: " if len(bad) > 1 else ""
        raise DataError(f"{source}: {many}" + "; ".join(bad) + f". Fix such a score or leave its row out; {remedy}")


# the metrics that are a share of items answered correctly: a testset's size bounds their item noise
ITEM_SHARES = frozenset({"accuracy", "acc", "acc_norm", "acc_mutual_info", "exact_match", "em", "correct"})


def is_item_share(metric: str) -> bool:
    return str(metric).split(",", 1)[0].strip().lower() in ITEM_SHARES
