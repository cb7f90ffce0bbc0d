"""The range a score can take, by its metric's name, and the first score outside it: an accuracy of
-0.2 or 1.7 in a table ``oodcorr analyse`` reads (:mod:`oodcorr.analysis.tables`), an lm-eval results
file (:mod:`oodcorr.analysis.lmeval`) or the workflow's own scores table is refused naming its line (or
row) and value. A share may be written as a percentage, told by the values (:func:`score_range`); a
metric without a known range (a log-likelihood) is only checked to be a number.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..core.errors import DataError

# A metric named here has a range its values must lie in; one not named (a log-likelihood, a
# user's own column) is only checked to be a number. lm-evaluation-harness's metrics by their
# names (``acc,none``: ``acc``) and the workflow's own columns (oodcorr.jobs.metrics.COLUMNS).
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
NON_NEGATIVE = frozenset({"perplexity", "word_perplexity", "byte_perplexity", "bits_per_byte", "ter"})
# the harness writes these as shares, never percentages (its squad-style ``exact`` and ``f1``,
# and a user's table, may be either: told by the values, :func:`score_range`)
LMEVAL_SHARES_ONLY = frozenset({"acc", "acc_norm", "acc_mutual_info", "exact_match"})


def metric_range(metric: str) -> tuple[float, float] | None:
    """The range of a metric by its name (a filter after a comma ignored, case ignored): (0, 1)
    for shares (accuracy, F1, ...), (-1, 1) for ``mcc``, (0, inf) for perplexities; None for a
    metric this does not know (only checked to be a number)."""
    name = str(metric).split(",", 1)[0].strip().lower()
    if name in SHARES:
        return (0.0, 1.0)
    if name in CORRELATIONS:
        return (-1.0, 1.0)
    if name in NON_NEGATIVE:
        return (0.0, math.inf)
    return None


def score_range(metric: str, values, *, percent: bool = True) -> tuple[tuple[float, float], str] | None:
    """(the range ``values`` of ``metric`` must lie in, how it was told), or None for a metric
    without one (:func:`metric_range`). A share may be written as a percentage (``percent``: a
    table from a paper, the harness's squad ``f1``): the values tell which, by their median (a
    median accuracy of at most 1 % is no percentage); so one score of 1.7 among shares is out of
    range, not the sign of a table in percent."""
    rng = metric_range(metric)
    if rng is None:
        return None
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    if not percent or rng[1] == math.inf or not len(v):
        return rng, ""
    median = float(np.median(np.abs(v)))
    if median <= 1:
        return rng, f"shares: their median is {median:.3g}"
    return (rng[0] * 100, rng[1] * 100), f"percentages: their median is {median:.3g}"


def out_of_range(
    scores: pd.DataFrame, metric: str, *, percent: bool = True
) -> tuple[object, object, float, str] | None:
    """(row, column, value, the sentence's end) of the first score in ``scores`` (one metric: a
    column, or a wide table's testset columns) outside the metric's range (:func:`score_range`, the
    scale told from all of them), or None when all lie inside (missing values and infinities are
    said elsewhere)."""
    v = scores.apply(lambda col: pd.to_numeric(col, errors="coerce")).astype(float)
    got = score_range(metric, v.to_numpy().ravel(), percent=percent)
    if got is None:
        return None
    (lo, hi), how = got
    for col in v.columns:
        x = v[col]
        bad = np.isfinite(x) & ((x < lo) | (x > hi))
        if bad.any():
            i = x.index[bad.to_numpy()][0]
            told = f" (the scores are {how})" if how else ""
            return i, col, float(x[i]), f"outside [{lo:g}, {hi:g}], the range of {metric.split(',', 1)[0]!r}{told}"
    return None


def check_score_range(scores: pd.DataFrame, metric: str, source: str, where: str, *, wide: bool) -> None:
    """A :class:`DataError` naming the line (the index of ``scores``), column and value of the first
    score outside its metric's range (:func:`out_of_range`); a wide table's scores are accuracies, unless
    ``--column-metric`` names a column's metric, and on one scale, unless ``--each-scale``."""
    bad = out_of_range(scores, metric)
    if bad is None:
        return
    i, col, value, why = bad
    other = (
        f"if the table's columns are on different scales, say how to read them: --each-scale reads each column "
        f"on its own (shares beside percentages), --column-metric {col}=METRIC names a column's metric (its range "
        f"is that metric's; a name without a known range, such as loglik, takes any number); or give the table in "
        "long format, its score column named after the metric (--score)"
        if wide
        else f"if column {col!r} holds another metric, name it after that metric and pass that name as --score"
    )
    raise DataError(
        f"{source}: {where} {i}, column {col!r}: score {value:g} is {why}; fix that score (a typo, a lost sign "
        f"or digit) or leave the row out; {other}"
    )
