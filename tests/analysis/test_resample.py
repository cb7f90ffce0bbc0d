"""Resampling (oodcorr.analysis.cell.resample): moving blocks, the block permutation test by hand, the
bootstrap interval, and why the ``block`` inference is no longer the default."""

import math

import numpy as np
import pytest

from oodcorr.analysis import Options
from oodcorr.analysis.cell.resample import block_permutation_p, bootstrap_ci, moving_block_indices
from oodcorr.analysis.simulate.runs import calibrate


def test_moving_blocks_are_consecutive_runs_of_units():
    idx = moving_block_indices(10, 3, 200, np.random.default_rng(0))
    assert idx.shape == (200, 10) and idx.min() >= 0 and idx.max() <= 9
    for row in idx:
        for start in (0, 3, 6):  # blocks 0-2, 3-5, 6-8 and the first unit of the fourth
            assert np.all(np.diff(row[start : start + 3]) == 1)
    # every start position 0..7 occurs (uniform over the n - b + 1 starts)
    assert set(idx[:, 0]) == set(range(8))


def test_exact_block_permutation_p_by_hand():
    rx = np.array([-2.0, -1.0, 0.0, 0.5, 1.0, 1.5])
    ry = np.array([-1.5, -1.0, 0.2, 0.1, 1.2, 1.0])
    p, exact = block_permutation_p(rx, ry, "pearson", 2, 2000, np.random.default_rng(0))
    # 3 blocks -> 6 orderings of ry's blocks; count those at least as extreme by hand
    blocks = [ry[0:2], ry[2:4], ry[4:6]]
    import itertools

    r0 = abs(np.corrcoef(rx, ry)[0, 1])
    rs = [abs(np.corrcoef(rx, np.concatenate([blocks[i] for i in o]))[0, 1]) for o in itertools.permutations(range(3))]
    assert exact and p == pytest.approx(sum(r >= r0 - 1e-12 for r in rs) / 6)
    assert p >= 1 / 6  # with three blocks no p-value can be smaller: the honest floor


def test_block_option_undercovers_short_strongly_dependent_runs():
    # the earlier default, kept as inference "block": with 21 checkpoints and phi = 0.8 its
    # bootstrap interval undercovers and its permutation test rejects a true null too often,
    # which is why it is no longer the default (benchmarks/analysis_coverage.py,
    # benchmarks/README.md#4-analysis-calibration-of-intervals-and-p-values)
    alt = calibrate(21, 0.8, 0.4, 200, ("block", "modified-t"), opts=Options(seed=1, n_boot=499, n_perm=199))
    assert alt["block"]["coverage"] < 0.85 < alt["modified-t"]["coverage"], alt
    null = calibrate(21, 0.8, 0.0, 200, ("block", "modified-t"), opts=Options(seed=1, n_boot=499, n_perm=199))
    assert null["block"]["reject"] > 0.1 > null["modified-t"]["reject"], null


def test_bootstrap_interval_is_nan_when_resamples_are_degenerate():
    rx = np.array([1.0, 0, 0, 0, 0, 0, 0, 0])
    ry = np.array([-1.0, 0, 0, 0, 0, 0, 0, 0])
    # blocks of 4: only a block starting at unit 0 holds the one informative unit, so
    # about 64% of resamples have constant residuals and no correlation at all
    lo, hi, used, se = bootstrap_ci(rx, ry, "pearson", 4, 400, 0.95, np.random.default_rng(0))
    assert math.isnan(lo) and math.isnan(hi) and math.isnan(se) and 100 < used < 200
    lo, hi, used, se = bootstrap_ci(
        rx + np.arange(8) * 0.1, ry - np.arange(8) * 0.1, "pearson", 4, 400, 0.95, np.random.default_rng(0)
    )
    assert lo < hi and used == 400 and se > 0
