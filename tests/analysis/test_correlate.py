"""The statistics: residualisers, correlation methods, resampling (the ``block`` inference),
corrections, options. Per-run inference: tests/analysis/test_inference.py; pooling and agreement:
tests/analysis/test_pooling.py."""

import math

import numpy as np
import pandas as pd
import pingouin as pg
import pytest
from scipy import stats

from oodcorr.analysis import (
    Options,
    adjust,
    bh,
    block_permutation_p,
    bootstrap_ci,
    holm,
    moving_block_indices,
    partial_corr,
    residual_pair,
)
from oodcorr.analysis.simulate import calibrate

from helpers import micro_config


def _ols_residuals(y, Z):
    X = np.column_stack([np.ones(len(y)), Z])
    return y - X @ np.linalg.solve(X.T @ X, X.T @ y)


# ---- residualisers and methods --------------------------------------------------------------


@pytest.mark.parametrize("seed", range(5))
def test_linear_partial_corr_equals_pingouin(seed):
    rng = np.random.default_rng(seed)
    n = 12 + seed * 7
    z = rng.normal(size=n)
    x = 0.8 * z + rng.normal(size=n)
    y = -0.5 * z + 0.3 * x + rng.normal(size=n)
    got = partial_corr(x, y, z)
    ref = pg.partial_corr(pd.DataFrame({"x": x, "y": y, "z": z}), x="x", y="y", covar="z")
    assert abs(got["r"] - ref["r"].iloc[0]) < 1e-10
    assert got["p"] == pytest.approx(ref["p_val"].iloc[0], rel=1e-8)
    assert got["n"] == n and got["dof"] == n - 3


def test_linear_with_step_equals_pingouin_with_two_covariates():
    rng = np.random.default_rng(11)
    n = 40
    step = np.arange(n) * 100.0
    z = np.log1p(step) / 10 + 0.05 * rng.normal(size=n)
    x = 0.5 * z + 1e-4 * step + rng.normal(size=n) * 0.1
    y = -0.2 * z + 2e-4 * step + 0.4 * x + rng.normal(size=n) * 0.1
    got = partial_corr(x, y, np.column_stack([z, step]), residualiser="linear+step")
    ref = pg.partial_corr(pd.DataFrame({"x": x, "y": y, "z": z, "s": step}), x="x", y="y", covar=["z", "s"])
    assert abs(got["r"] - ref["r"].iloc[0]) < 1e-10
    assert got["p"] == pytest.approx(ref["p_val"].iloc[0], rel=1e-8)


def test_spearman_matches_pingouin_and_kendall_is_tau_of_residuals():
    rng = np.random.default_rng(7)
    z = rng.normal(size=30)
    x = np.exp(z) + rng.normal(size=30)
    y = z**3 + rng.normal(size=30)
    got = partial_corr(x, y, z, method="spearman")
    ref = pg.partial_corr(pd.DataFrame({"x": x, "y": y, "z": z}), x="x", y="y", covar="z", method="spearman")
    assert abs(got["r"] - ref["r"].iloc[0]) < 1e-10
    tau = stats.kendalltau(_ols_residuals(x, z), _ols_residuals(y, z))
    k = partial_corr(x, y, z, method="kendall")
    assert k["r"] == pytest.approx(tau.statistic, abs=1e-12) and k["p"] == pytest.approx(tau.pvalue)
    # the three differ on this nonlinear data: the methods are not aliases
    assert len({round(partial_corr(x, y, z, method=m)["r"], 6) for m in ("pearson", "spearman", "kendall")}) == 3


def _quadratic(seed, n=150, rho=0.6):
    rng = np.random.default_rng(seed)
    z = rng.uniform(0.5, 0.9, size=n)
    f = 25 * (z - 0.7) ** 2  # a U shape: OOD score depends nonlinearly on in-domain score
    e = rng.multivariate_normal([0, 0], [[1, rho], [rho, 1]], size=n) * 0.1
    return f + e[:, 0], f + e[:, 1], z, rho


def test_gam_recovers_noise_correlation_where_linear_is_biased():
    gam_err, lin_err = [], []
    for seed in range(3):
        x, y, z, rho = _quadratic(seed)
        g = partial_corr(x, y, z, residualiser="gam")
        lin = partial_corr(x, y, z, residualiser="linear")
        assert g["note"] == "" and lin["note"] == ""
        gam_err.append(g["r"] - rho)
        lin_err.append(lin["r"] - rho)
    # the GAM removes f(z); OLS leaves its curvature in both residuals, a shared positive part
    assert max(abs(e) for e in gam_err) < 0.08, gam_err
    assert min(lin_err) > 0.2, lin_err


def test_gam_with_step_removes_a_shared_trend_in_training_step():
    rng = np.random.default_rng(3)
    n, rho = 120, 0.3
    step = np.arange(n, dtype=float)
    z = rng.uniform(0.5, 0.9, size=n)  # in-domain score unrelated to the step trend
    trend = np.sin(step / n * 3 * np.pi) * 0.3  # both OOD testsets drift together with training
    e = rng.multivariate_normal([0, 0], [[1, rho], [rho, 1]], size=n) * 0.1
    x, y = 0.5 * z + trend + e[:, 0], -0.3 * z + trend + e[:, 1]
    only_z = partial_corr(x, y, z, residualiser="gam")
    with_step = partial_corr(x, y, np.column_stack([z, step]), residualiser="gam+step")
    assert abs(with_step["r"] - rho) < 0.12, with_step
    assert only_z["r"] - rho > 0.3, only_z


@pytest.mark.parametrize(
    "x, y, z, res, note",
    [
        ([1, 1, 1, 1, 1], [1, 2, 3, 4, 6], [1, 3, 2, 5, 4], "linear", "x is constant"),
        ([1, 2, 3, 4, 6], [1, 3, 2, 5, 4], [7, 7, 7, 7, 7], "linear", "covariate (in-domain score) is constant"),
        ([1, 2, 3], [3, 1, 2], [1, 2, 4], "linear", "only 3 complete points"),
        ([1, 2, np.nan, 4, 5], [2, 1, 4, 3, np.nan], [1, 2, 3, 4, 5], "linear", "only 3 complete points of 5"),
        ([1, 2, 3, 4, 5], [2, 4, 6, 8, 10], [1, 2, 3, 4, 5], "linear", "zero residual"),
        (
            [1, 3, 2, 5, 4, 6, 7],
            [2, 1, 4, 3, 6, 5, 7],
            [1, 2, 3, 4, 5, 6, 7],
            "gam",
            "only 7 complete points; the gam residualiser needs at least 8",
        ),
    ],
)
def test_degenerate_inputs_give_nan_with_a_reason(x, y, z, res, note):
    got = partial_corr(x, y, z, residualiser=res)
    assert math.isnan(got["r"]) and math.isnan(got["p"])
    assert note in got["note"], got["note"]


def test_unknown_names_raise_naming_them():
    with pytest.raises(ValueError, match="'loess'"):
        partial_corr([1, 2, 3, 4], [1, 2, 3, 4], [1, 2, 3, 5], residualiser="loess")
    with pytest.raises(ValueError, match="'distance'"):
        partial_corr([1, 2, 3, 4], [1, 2, 3, 4], [1, 2, 3, 5], method="distance")


# ---- resampling ------------------------------------------------------------------------------


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
    alt = calibrate(21, 0.8, 0.4, 200, ("block", "modified-t"), seed=1, n_boot=499, n_perm=199)
    assert alt["block"]["coverage"] < 0.85 < alt["modified-t"]["coverage"], alt
    null = calibrate(21, 0.8, 0.0, 200, ("block", "modified-t"), seed=1, n_boot=499, n_perm=199)
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


# ---- corrections, pooling, agreement -----------------------------------------------------------


def test_holm_and_bh_match_statsmodels_and_skip_nans():
    multipletests = pytest.importorskip("statsmodels.stats.multitest").multipletests
    rng = np.random.default_rng(4)
    p = np.concatenate([rng.uniform(0, 0.05, 6), rng.uniform(0, 1, 14)])
    for mine, theirs in ((holm, "holm"), (bh, "fdr_bh")):
        assert np.allclose(mine(p), multipletests(p, method=theirs)[1], atol=1e-12)
    with_nan = np.array([0.01, np.nan, 0.04, 0.03])
    got = adjust(with_nan, "holm")
    assert math.isnan(got[1])
    assert np.allclose(got[[0, 2, 3]], multipletests(with_nan[[0, 2, 3]], method="holm")[1])
    # a hand-computed example: Holm (0.01, 0.04, 0.03) -> (0.03, 0.06, 0.06); BH -> (0.03, 0.04, 0.04)
    assert np.allclose(holm([0.01, 0.04, 0.03]), [0.03, 0.06, 0.06])
    assert np.allclose(bh([0.01, 0.04, 0.03]), [0.03, 0.04, 0.04])


def test_options_defaults_equal_the_filled_config_and_unknown_keys_are_named():

    from oodcorr.planning.config import analysis_options
    from oodcorr.planning.schema import fill_defaults

    from helpers import REPO

    cfg = micro_config()
    cfg["analysis"] = {}
    fill_defaults(cfg, REPO / "config/schema.yaml")
    # every key of the filled section reaches its Options field (a nested name mapped wrong would differ)
    assert Options.from_mapping(analysis_options(cfg["analysis"])) == Options()
    with pytest.raises(ValueError, match="analysis.bootstrap.blocks"):
        Options.from_mapping({"bootstrap": {"blocks": 3}})
    with pytest.raises(ValueError, match="analysis.pooling.within"):
        Options.from_mapping({"pooling": {"within": ["n_train"]}})
    # the setting the new inference replaced is named, with what replaced it
    with pytest.raises(ValueError, match="p_method was replaced by analysis.inference"):
        Options.from_mapping({"p_method": "auto"})
    got = Options.from_mapping(
        {
            "inference": "block",
            "pooling": {"by": [], "two_runs": "fixed-effect"},
            "step0": {"drop": True, "check": False},
            "near_zero": 0.2,
        }
    )
    assert (got.inference, got.pool_by, got.pool_two_runs, got.drop_step0, got.step0_check, got.near_zero) == (
        "block",
        (),
        "fixed-effect",
        True,
        False,
        0.2,
    )
    with pytest.raises(ValueError, match="unknown inference 'bootstrap'"):
        Options(inference="bootstrap")


def test_residual_pair_reuses_cached_residuals():
    rng = np.random.default_rng(0)
    z, x, y, w = (rng.normal(size=20) for _ in range(4))
    cache = {}
    first = residual_pair(x, y, z, cache=cache, names=("x", "y"))
    assert len(cache) == 3  # x, y and the covariates' part (ranks, residual maker) for these rows
    second = residual_pair(x, w, z, cache=cache, names=("x", "w"))
    assert len(cache) == 4 and second["rx"] is first["rx"] and second["Rx"] is first["Ry"]
