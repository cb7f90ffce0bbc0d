"""A run's per-item records as matrices (oodcorr.analysis.item_noise.item_matrices): one (units x
items) matrix per testset in the run's unit order, a unit without records a row of NaN, rows of
other units left out, and the testsets whose records are not one matrix named with the reason."""

from __future__ import annotations

import numpy as np
import pandas as pd

from oodcorr.analysis.item_noise import item_matrices


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
