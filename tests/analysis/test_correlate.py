"""Partial correlations (oodcorr.analysis.correlate): the residualisers and correlation methods
against pingouin and by hand, degenerate inputs, and the residual cache. Resampling:
tests/analysis/test_resample.py; corrections: test_multitest.py; per-run inference:
test_inference.py; pooling and agreement: test_pooling.py."""

import math

import numpy as np
import pandas as pd
import pingouin as pg
import pytest
from scipy import stats

from oodcorr.analysis import (
    partial_corr,
    residual_pair,
)


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


def test_residual_pair_reuses_cached_residuals():
    rng = np.random.default_rng(0)
    z, x, y, w = (rng.normal(size=20) for _ in range(4))
    cache = {}
    first = residual_pair(x, y, z, cache=cache, names=("x", "y"))
    assert len(cache) == 3  # x, y and the covariates' part (ranks, residual maker) for these rows
    second = residual_pair(x, w, z, cache=cache, names=("x", "w"))
    assert len(cache) == 4 and second["rx"] is first["rx"] and second["Rx"] is first["Ry"]


# ---- Fisher's z -------------------------------------------------------------------------------


def test_each_fisher_z_cap_bounds_z_where_its_comment_says_and_changes_nothing_below_it():
    from oodcorr.analysis.correlate import FINITE_CAP, POOLING_CAP, RESAMPLED_CAP, fisher_z

    r = np.array([-0.99, -0.3, 0.0, 0.5, 0.9])
    for cap, top in ((POOLING_CAP, 4.95), (RESAMPLED_CAP, 10.7), (FINITE_CAP, 17.62)):
        np.testing.assert_array_equal(fisher_z(r, cap), np.arctanh(r))
        z = fisher_z([-1.0, 1.0], cap)
        assert z[1] == -z[0] == pytest.approx(top, abs=0.01)
    assert POOLING_CAP < RESAMPLED_CAP < FINITE_CAP < 1
