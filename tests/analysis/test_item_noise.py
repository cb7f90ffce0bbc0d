"""A run's per-item records as matrices (oodcorr.analysis.items.item_noise.item_matrices): one (units x
items) matrix per testset in the run's unit order, a unit without records a row of NaN, rows of
other units left out, and the testsets whose records are not one matrix named with the reason."""

from __future__ import annotations

import numpy as np
import pandas as pd

from oodcorr.analysis.items.item_noise import item_matrices


def _rows(testset, unit, examples, correct):
    return pd.DataFrame({"unit": unit, "testset": testset, "example": examples, "correct": correct})


def test_records_become_one_matrix_per_testset_in_the_runs_unit_order():
    ex = pd.concat(
        [
            _rows("b", 20, ["q2", "q1"], [1, 0]),
            _rows("b", 10.0, ["q1", "q2"], [1, 1]),  # a float unit is the same unit
            _rows("a", 10, [5, 3, 4], [0, 1, 1]),
            _rows("a", 99, [5, 3, 4], [1, 1, 1]),  # not a unit of the run: left out
            _rows("a", 30, [3, 4, 5], [0, 0, 1]),
            _rows("dup", 10, [1, 1], [0, 1]),
            _rows("uneven", 10, [1, 2], [0, 1]),
            _rows("uneven", 20, [1], [1]),
        ],
        ignore_index=True,
    )
    ex["testset"] = ex["testset"].astype("category")  # as oodcorr analyse --examples reads them
    mats, problems = item_matrices(ex.sample(frac=1, random_state=0), [30, 10, 20])
    assert list(mats) == ["a", "b"]
    np.testing.assert_array_equal(mats["a"], [[0, 0, 1], [1, 1, 0], [np.nan] * 3])  # items 3, 4, 5
    np.testing.assert_array_equal(mats["b"], [[np.nan] * 2, [1, 1], [0, 1]])  # items q1, q2
    assert problems == {
        "dup": "duplicate (unit, example) predictions for dup",
        "uneven": "uneven was evaluated on different examples at different units",
    }
    assert item_matrices(ex.iloc[:0], [10]) == ({}, {})


def test_a_score_of_0_or_1_has_no_binomial_noise_whatever_its_size():
    """lm-eval writes acc 0 with acc_stderr 0 (the Pythia suite's LAMBADA at its first checkpoints),
    from which no size can be read back: the bound there is 0 all the same (p (1 - p) = 0), not
    unknown, so the in-domain set's bound still corrects the run."""
    from oodcorr.analysis.items.item_noise import binomial_bound

    np.testing.assert_array_equal(
        np.diag(binomial_bound([0.0, 0.5, 1.0, 0.5], [np.nan, 100, np.nan, np.nan])), [0, 0.0025, 0, np.nan]
    )


def test_the_in_domain_bound_corrects_a_run_whose_first_scores_are_0_of_unknown_size():
    from oodcorr.analysis import Options, analyse

    rng = np.random.default_rng(1)
    T = 14
    z = np.r_[np.zeros(4), np.linspace(0.1, 0.6, T - 4)] + np.r_[np.zeros(4), rng.normal(0, 0.01, T - 4)]
    rows = [("ind", u, z[u], np.nan if z[u] == 0 else 500.0) for u in range(T)]
    for t in ("a", "b", "c"):
        rows += [(t, u, 0.3 + 0.3 * z[u] + rng.normal(0, 0.02), 300.0) for u in range(T)]
    long = pd.DataFrame(rows, columns=["testset", "unit", "score", "n"]).assign(model="m", run="r", in_domain="ind")
    out = analyse(long, Options(example_boot=0, pool_by=()))
    runs = out[out["run"] != "pooled"]
    assert (runs["eiv_from"] == "bound").all() and np.isfinite(runs["r_eiv"]).all()
