"""Partial correlations (oodcorr.analysis.cell.correlate, one run's through run_cells.partial_corr): the
residualisers and correlation methods against pingouin and by hand, degenerate inputs, and the
residual cache. Resampling:
tests/analysis/test_resample.py; corrections: test_multitest.py; per-run inference:
test_inference.py; pooling and agreement: test_pooling.py."""

import math

import numpy as np
import pandas as pd
import pingouin as pg
import pytest
from scipy import stats

from oodcorr.analysis import Options, partial_corr
from oodcorr.analysis.cell.correlate import residual_pair


def _one_pair(x, y, covars, method="pearson", residualiser="spline") -> dict:
    """The one cell of a run of testsets x, y and the in-domain z (``covars``: z, or z and the step,
    which are then the run's units) from the workflow's per-run function."""
    Z = np.asarray(covars, dtype=float).reshape(len(x), -1)
    step = Z.shape[1] > 1
    units = Z[:, 1] if step else np.arange(len(x))
    long = pd.DataFrame(
        {
            "model": "m",
            "in_domain": "z",
            "run": "r",
            "unit": np.tile(units, 3),
            "testset": np.repeat(["x", "y", "z"], len(x)),
            "score": np.concatenate([np.asarray(x, dtype=float), np.asarray(y, dtype=float), Z[:, 0]]),
        }
    )
    opts = Options(methods=(method,), residualisers=(residualiser,), step0_check=False, example_boot=0)
    (row,) = partial_corr(long, opts, ordered=step)
    return row


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
    got = _one_pair(x, y, z, residualiser="linear")
    ref = pg.partial_corr(pd.DataFrame({"x": x, "y": y, "z": z}), x="x", y="y", covar="z")
    assert abs(got["r"] - ref["r"].iloc[0]) < 1e-10
    assert got["p_param"] == pytest.approx(ref["p_val"].iloc[0], rel=1e-8) and got["n"] == n


def test_linear_with_step_equals_pingouin_with_two_covariates():
    rng = np.random.default_rng(11)
    n = 40
    step = np.arange(n) * 100.0
    z = np.log1p(step) / 10 + 0.05 * rng.normal(size=n)
    x = 0.5 * z + 1e-4 * step + rng.normal(size=n) * 0.1
    y = -0.2 * z + 2e-4 * step + 0.4 * x + rng.normal(size=n) * 0.1
    got = _one_pair(x, y, np.column_stack([z, step]), residualiser="linear+step")
    ref = pg.partial_corr(pd.DataFrame({"x": x, "y": y, "z": z, "s": step}), x="x", y="y", covar=["z", "s"])
    assert abs(got["r"] - ref["r"].iloc[0]) < 1e-10
    assert got["p_param"] == pytest.approx(ref["p_val"].iloc[0], rel=1e-8)


def test_spearman_matches_pingouin_and_kendall_is_tau_of_residuals():
    rng = np.random.default_rng(7)
    z = rng.normal(size=30)
    x = np.exp(z) + rng.normal(size=30)
    y = z**3 + rng.normal(size=30)
    got = _one_pair(x, y, z, method="spearman", residualiser="linear")
    ref = pg.partial_corr(pd.DataFrame({"x": x, "y": y, "z": z}), x="x", y="y", covar="z", method="spearman")
    assert abs(got["r"] - ref["r"].iloc[0]) < 1e-10
    tau = stats.kendalltau(_ols_residuals(x, z), _ols_residuals(y, z))
    k = _one_pair(x, y, z, method="kendall", residualiser="linear")
    assert k["r"] == pytest.approx(tau.statistic, abs=1e-12) and k["p_param"] == pytest.approx(tau.pvalue)
    # the three differ on this nonlinear data: the methods are not aliases
    assert (
        len(
            {
                round(_one_pair(x, y, z, method=m, residualiser="linear")["r"], 6)
                for m in ("pearson", "spearman", "kendall")
            }
        )
        == 3
    )


def _quadratic(seed, n=150, rho=0.6):
    rng = np.random.default_rng(seed)
    z = rng.uniform(0.5, 0.9, size=n)
    f = 25 * (z - 0.7) ** 2  # a U shape: OOD score depends nonlinearly on in-domain score
    e = rng.multivariate_normal([0, 0], [[1, rho], [rho, 1]], size=n) * 0.1
    return f + e[:, 0], f + e[:, 1], z, rho


@pytest.mark.parametrize("curve", ["spline", "gam"])
def test_a_curve_recovers_noise_correlation_where_linear_is_biased(curve):
    gam_err, lin_err = [], []
    for seed in range(3):
        x, y, z, rho = _quadratic(seed)
        g = _one_pair(x, y, z, residualiser=curve)
        lin = _one_pair(x, y, z, residualiser="linear")
        assert g["note"] == "" and lin["note"] == ""
        gam_err.append(g["r"] - rho)
        lin_err.append(lin["r"] - rho)
    # the GAM removes f(z); OLS leaves its curvature in both residuals, a shared positive part
    assert max(abs(e) for e in gam_err) < 0.08, gam_err
    assert min(lin_err) > 0.2, lin_err


@pytest.mark.parametrize("curve", ["spline", "gam"])
def test_a_curve_with_step_removes_a_shared_trend_in_training_step(curve):
    rng = np.random.default_rng(3)
    n, rho = 120, 0.3
    step = np.arange(n, dtype=float)
    z = rng.uniform(0.5, 0.9, size=n)  # in-domain score unrelated to the step trend
    trend = np.sin(step / n * 3 * np.pi) * 0.3  # both OOD testsets drift together with training
    e = rng.multivariate_normal([0, 0], [[1, rho], [rho, 1]], size=n) * 0.1
    x, y = 0.5 * z + trend + e[:, 0], -0.3 * z + trend + e[:, 1]
    only_z = _one_pair(x, y, z, residualiser=curve)
    with_step = _one_pair(x, y, np.column_stack([z, step]), residualiser=f"{curve}+step")
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
    got = _one_pair(x, y, z, residualiser=res)
    assert math.isnan(got["r"]) and math.isnan(got["p"]) and math.isnan(got["p_param"])
    assert note in got["note"], got["note"]


def test_unknown_names_raise_naming_them():
    with pytest.raises(ValueError, match="'loess'"):
        _one_pair([1, 2, 3, 4], [1, 2, 3, 4], [1, 2, 3, 5], residualiser="loess")
    with pytest.raises(ValueError, match="'distance'"):
        _one_pair([1, 2, 3, 4], [1, 2, 3, 4], [1, 2, 3, 5], method="distance")


@pytest.mark.parametrize("res", ["spline", "linear"])
def test_residual_pair_reuses_cached_residuals(res):
    rng = np.random.default_rng(0)
    z, x, y, w = (rng.normal(size=20) for _ in range(4))
    cache = {}
    first = residual_pair(x, y, z, residualiser=res, cache=cache, names=("x", "y"))
    assert len(cache) == 3  # x, y and the covariates' part (ranks, residual maker or basis) for these rows
    second = residual_pair(x, w, z, residualiser=res, cache=cache, names=("x", "w"))
    assert len(cache) == 4 and second["rx"] is first["rx"] and second["Rx"] is first["Rx"]
    if res == "linear":  # one residual maker for every series on these rows
        assert second["Ry"] is first["Ry"]


# ---- the spline residualiser ------------------------------------------------------------------


def _reml_brute_force(y, basis_cols, X0, lam):
    """-2 restricted log-likelihood (profiled variance, up to a constant) of y = X0 b + Xp u + e,
    u ~ N(0, s2 / lam), e ~ N(0, s2), from the dense marginal covariance: what SplineBasis.choose
    computes through the Demmler-Reinsch directions."""
    n, p0 = X0.shape
    V = np.eye(n) + (basis_cols @ basis_cols.T) / lam if np.isfinite(lam) else np.eye(n)
    Vi = np.linalg.inv(V)
    A = X0.T @ Vi @ X0
    P = Vi - Vi @ X0 @ np.linalg.solve(A, X0.T @ Vi)
    q = float(y @ P @ y)
    return np.linalg.slogdet(V)[1] + np.linalg.slogdet(A)[1] + (n - p0) * np.log(q / (n - p0))


def test_spline_penalty_is_the_reml_choice_of_its_grid():
    from oodcorr.analysis.cell.residualise import _LAM_RATIOS, GamSettings, spline_basis

    rng = np.random.default_rng(4)
    n = 30
    z = np.sort(rng.uniform(0.4, 0.9, n))
    for y in (1 / (1 + np.exp(-(z - 0.7) * 25)) + 0.03 * rng.normal(size=n), 0.3 * z + 0.03 * rng.normal(size=n)):
        basis = spline_basis(z[:, None], GamSettings())
        lams = np.concatenate([_LAM_RATIOS * basis.d.max(), [np.inf]])
        # the penalised columns in data space: W diag(sqrt(d)) spans what the penalty shrinks
        cols = basis.W * np.sqrt(basis.d)
        X0 = basis.Q0
        crit = [_reml_brute_force(y, cols, X0, lam) for lam in lams]
        assert basis.choose(y[:, None])[0] == lams[int(np.argmin(crit))]


def test_spline_is_the_line_where_the_data_are_straight_and_a_line_at_any_penalty():
    from oodcorr.analysis.cell.residualise import GamSettings, linear, spline_basis

    rng = np.random.default_rng(5)
    n = 40
    z = np.sort(rng.uniform(0.4, 0.9, n))
    basis = spline_basis(z[:, None], GamSettings())
    line = 2.0 * z + 1.0
    for lam in (1e-9, 1.0, np.inf):  # a straight line is left untouched by the penalty
        res, _ = basis.residuals(line[:, None], np.array([lam]))
        assert np.abs(res).max() < 1e-10
    lines = 0.4 * z[:, None] + 0.02 * rng.normal(size=(n, 200))
    lam = basis.choose(lines)
    res, edf = basis.residuals(lines, lam)
    # REML puts the penalty at infinity (the line itself) for most straight series, and near it for
    # the rest (their curve uses at most a fraction of a degree of freedom more than the line)
    assert np.mean(np.isinf(lam)) > 0.5 and np.mean(edf) < 2.5
    np.testing.assert_allclose(res[:, np.isinf(lam)], linear(lines[:, np.isinf(lam)], z[:, None])[0], atol=1e-12)
    # and its residual maker reproduces the residuals of a curved series
    bent = np.exp(4 * z) / 20 + 0.02 * rng.normal(size=n)
    lam = basis.choose(bent[:, None])
    res, edf = basis.residuals(bent[:, None], lam)
    assert np.isfinite(lam[0]) and 2.5 < edf[0] < 10
    np.testing.assert_allclose(basis.maker(lam[0]) @ bent, res[:, 0], atol=1e-12)


def test_spline_follows_a_steep_rise_where_the_checkpoints_are_sparse():
    # checkpoints evenly spaced in steps, a loss-like in-domain score that moves fast early and slowly
    # late: most points crowd at one end. The OOD curve rises steeply among the sparse ones. Knots at
    # the quantiles of z left that rise to one cubic piece (residuals 16 % of the line's); the even
    # knots follow it (under 2 %), so no misfit is left for every series of the run to share.
    from oodcorr.analysis.cell.residualise import GamSettings, linear, spline_basis

    z = 1 - np.arange(1, 121) ** -0.5
    y = 0.25 + 0.5 / (1 + np.exp(-(z - 0.5) * 15))
    basis = spline_basis(z[:, None], GamSettings())
    res, _ = basis.residuals(y[:, None], basis.choose(y[:, None]))
    line_res, _ = linear(y, z[:, None])
    assert np.sqrt(np.mean(res**2)) < 0.03 * np.sqrt(np.mean(line_res**2))


def test_spline_below_its_minimum_points_is_the_line_and_says_so():
    rng = np.random.default_rng(6)
    z, x, y = (rng.normal(size=7) for _ in range(3))
    sp = residual_pair(x, y, z, residualiser="spline")
    lin = residual_pair(x, y, z, residualiser="linear")
    np.testing.assert_allclose(sp["rx"], lin["rx"], atol=1e-12)
    assert sp["form_note"] == "only 7 complete points: the spline needs 8, so the line was used"
    assert lin["form_note"] == ""
    ties = np.repeat([0.5, 0.6, 0.7], 4)  # 12 points but 3 distinct in-domain scores
    sp = residual_pair(rng.normal(size=12), rng.normal(size=12), ties, residualiser="spline")
    assert sp["form_note"].startswith("fewer than 4 distinct in-domain scores")


# ---- Fisher's z -------------------------------------------------------------------------------


def test_each_fisher_z_cap_bounds_z_where_its_comment_says_and_changes_nothing_below_it():
    from oodcorr.analysis.cell.correlate import FINITE_CAP, POOLING_CAP, RESAMPLED_CAP, fisher_z

    r = np.array([-0.99, -0.3, 0.0, 0.5, 0.9])
    for cap, top in ((POOLING_CAP, 4.95), (RESAMPLED_CAP, 10.7), (FINITE_CAP, 17.62)):
        np.testing.assert_array_equal(fisher_z(r, cap), np.arctanh(r))
        z = fisher_z([-1.0, 1.0], cap)
        assert z[1] == -z[0] == pytest.approx(top, abs=0.01)
    assert POOLING_CAP < RESAMPLED_CAP < FINITE_CAP < 1
