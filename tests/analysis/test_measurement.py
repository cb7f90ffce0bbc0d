"""Scores as measurements (oodcorr.analysis.items.measurement, item_noise, simulate_items): the
cross-fitted correlation is not faked by the in-domain set's noise, the moments are free of item
noise, the pooled tasks' correlation finds the truth, and the pieces by hand."""

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from oodcorr.analysis.design.power import run_statistics
from oodcorr.analysis.items.item_noise import binomial_bound, half_means, item_covariance, item_matrices, noise_summary
from oodcorr.analysis.items.measurement import bounded, cross_fitted, disattenuate, instrumented_makers, ratio_of_means
from oodcorr.analysis.simulate.items import (
    disagreement,
    item_noise_covariance,
    item_runs,
    population,
)

T = 25
P = np.eye(T) - 1.0 / T


def _study(truth, sizes, runs=400, seed=3, **kw):
    d = item_runs(np.random.default_rng(seed), [truth] * runs, T, sizes, **kw)
    h = d["halves"]
    got = cross_fitted(h[..., 0], P, d["scores"][:, :, 1:], h[..., 1:], np.array([[0, 1]]), np.arange(T))
    return d, got


def _true_moments(d):
    a = d["truth"]
    z, x, y = (a[:, :, k] for k in range(3))

    def dot(u, v):
        return np.einsum("bt,tu,bu->b", u, P, v)

    bx, by = dot(z, x) / dot(z, z), dot(z, y) / dot(z, z)
    rx, ry = x - bx[:, None] * z, y - by[:, None] * z
    return dot(rx, ry), dot(rx, rx), dot(ry, ry)


def test_a_noisy_in_domain_set_fakes_the_observed_correlation_but_not_the_cross_fitted_one():
    # truth 0 in every run; an in-domain set of 200 items, OOD sets of 3,000
    d, got = _study(0.0, (200, 3000, 3000))
    observed = run_statistics(d["scores"])["r"]
    assert observed.mean() > 0.2  # the errors in variables: both residuals keep part of the in-domain ability
    r = got["r"][:, 0]
    assert abs(r.mean()) < 3 * r.std() / math.sqrt(len(r))  # centred on the truth
    assert np.mean(got["p"][:, 0] < 0.05) < 0.08  # each run's test holds its size (400 runs: se 0.011)


def test_the_moments_are_free_of_item_noise_where_the_observed_ones_are_not():
    d, got = _study(0.5, (200, 100, 100))
    cov, vx, vy = _true_moments(d)
    # item noise is most of each observed residual series (100 items) ...
    assert got["obs_x"].mean() > 4 * vx.mean()
    # ... and none of the noise-free ones, to within the Monte Carlo error of 400 runs
    for est, truth in ((got["var_x"][:, 0], vx), (got["var_y"][:, 0], vy), (got["cov"][:, 0], cov)):
        se = est.std() / math.sqrt(len(est))
        assert abs(est.mean() - truth.mean()) < 3 * se + 0.02 * abs(truth.mean())


def test_the_tasks_correlation_pooled_over_models_finds_the_truth():
    # 12 models, OOD sets of 300 items: the pooled ratio lands near the truth, its interval covers it
    hits, ests = 0, []
    for seed in range(40):
        d, got = _study(0.5, (1000, 300, 300), runs=12, seed=seed)
        est, lo, hi = ratio_of_means(got["cov"][:, 0], got["var_x"][:, 0], got["var_y"][:, 0])
        ests.append(est)
        hits += lo <= 0.5 <= hi
    assert abs(np.median(ests) - 0.5) < 0.15
    assert hits >= 34  # 85 % of 40 studies at least (0.95 nominal)


def test_ratio_of_means_by_hand():
    num, ax, ay = np.array([0.2, 0.3, 0.1, 0.4]), np.array([0.5, 0.6, 0.4, 0.5]), np.array([0.4, 0.5, 0.5, 0.4])
    est, lo, hi = ratio_of_means(num, ax, ay)
    assert est == pytest.approx(num.mean() / math.sqrt(ax.mean() * ay.mean()))
    assert lo < est < hi
    # Fieller: the bounds solve (a - rho d)^2 = t^2 var(a - rho d) / k with d linearised per unit
    D = math.sqrt(ax.mean() * ay.mean())
    d = D * (ax / (2 * ax.mean()) + ay / (2 * ay.mean()))
    t2 = stats.t.ppf(0.975, 3) ** 2
    for rho in (lo, hi):
        diff = num - rho * d
        assert diff.mean() ** 2 == pytest.approx(t2 * diff.var(ddof=1) / 4, rel=1e-9)
    # two units: the ratio, no interval; a denominator not clearly positive: the whole range
    assert math.isnan(ratio_of_means(num[:2], ax[:2], ay[:2])[1])
    assert ratio_of_means(num, np.array([0.1, -0.2, 0.05, -0.1]), ay)[1:] == (-1.0, 1.0)


def test_item_covariance_is_what_resampling_the_items_adds():
    rng = np.random.default_rng(0)
    mat = (rng.random((6, 40)) < np.linspace(0.3, 0.8, 6)[:, None]).astype(float)
    S = item_covariance(mat)
    # the covariance of the items' correctness between units, over the number of items
    assert np.allclose(S, np.cov(mat) / mat.shape[1])
    assert np.allclose(S, S.T) and np.all(np.linalg.eigvalsh(S) > -1e-12)
    # the binomial bound is white, p (1 - p) / n
    b = binomial_bound(np.array([0.5, 0.9, 1.2]), np.array([100, 10, 50]))
    assert np.allclose(np.diag(b), [0.0025, 0.009, 0.0]) and b[0, 1] == 0


def test_halves_share_no_item_and_average_to_the_whole_set():
    rng = np.random.default_rng(1)
    mat = (rng.random((5, 30)) < 0.6).astype(float)
    mat[2] = np.nan  # a unit without records
    h, (a, b) = half_means(mat, 4, np.random.default_rng(2))
    assert h.shape == (4, 2, 5) and (a, b) == (15, 15)
    full = np.nanmean(mat, 1)
    assert np.allclose((h[:, 0] + h[:, 1]) / 2, full[None], equal_nan=True)
    assert np.isnan(h[:, :, 2]).all()
    assert not np.allclose(h[0, 0], h[1, 0], equal_nan=True)  # each split its own halves


def test_item_matrices_align_units_and_refuse_what_is_not_one_testset():
    ex = pd.DataFrame(
        {
            "unit": [0, 0, 10, 10, 0, 0, 10],
            "testset": ["a", "a", "a", "a", "b", "b", "b"],
            "example": [1, 2, 1, 2, 1, 2, 3],
            "correct": [1, 0, 1, 1, 0, 1, 1],
        }
    )
    mats, problems = item_matrices(ex, [0, 10, 20])
    assert mats["a"].shape == (3, 2) and np.isnan(mats["a"][2]).all() and mats["a"][1].tolist() == [1, 1]
    assert "b" not in mats and "different examples" in problems["b"]


def test_the_simulators_item_noise_is_what_its_items_give():
    acc = population(np.random.default_rng(4), [0.0], T)[0, :, 1]
    n = 200
    exact = item_noise_covariance(acc, n, 0.5, 0.8)
    from oodcorr.analysis.simulate.items import answer_items

    draws = np.stack([answer_items(np.random.default_rng(s), acc[None], n, 0.5, 0.8)[0].mean(-1) for s in range(1500)])
    emp = np.cov(draws.T)
    # 1,500 draws: each variance within about 3.7 % (one se), their mean over checkpoints closer
    assert np.mean(np.diag(emp) / np.diag(exact)) == pytest.approx(1.0, abs=0.05)
    lag1 = np.diag(emp, 1) / np.sqrt(np.diag(emp)[:-1] * np.diag(emp)[1:])
    exact1 = np.diag(exact, 1) / np.sqrt(np.diag(exact)[:-1] * np.diag(exact)[1:])
    assert np.mean(lag1) == pytest.approx(np.mean(exact1), abs=0.05) and np.mean(lag1) > 0.5  # persistent
    # neighbouring checkpoints disagree on about 12 % of items at correlation 0.9 and accuracy 0.7
    assert disagreement(0.7, 0.9) == pytest.approx(0.125, abs=0.01)
    summary = noise_summary(answer_items(np.random.default_rng(9), acc[None], 2000, 0.5, 0.8)[0].astype(float))
    assert 0.08 < summary["disagreement"] < 0.2 and summary["noise_lag1"] > 0.5


def test_instrumented_makers_remove_the_in_domain_ability_of_a_noise_free_score():
    rng = np.random.default_rng(5)
    z = np.cumsum(rng.normal(size=T))
    zh = np.stack([z, z])[None]  # two identical halves: no noise
    R, den = instrumented_makers(zh, P)
    x = 2.0 * z + 0.3
    assert np.allclose(R[0, 0] @ x, 0, atol=1e-9) and np.allclose(R[0, 1] @ x, 0, atol=1e-9)


def test_bounded_is_the_observed_correlation_at_no_noise_and_empty_within_the_noise():
    rng = np.random.default_rng(6)
    z = np.linspace(0.5, 0.8, T) + 0.01 * rng.normal(size=T)
    X = np.column_stack([0.6 * z + 0.02 * rng.normal(size=T), 0.5 * z + 0.02 * rng.normal(size=T)])
    pairs = np.array([[0, 1]])
    r0 = bounded(z, P, X, pairs, 0.0)[0]
    rx = X[:, 0] - np.polyval(np.polyfit(z, X[:, 0], 1), z)
    ry = X[:, 1] - np.polyval(np.polyfit(z, X[:, 1], 1), z)
    assert r0 == pytest.approx(np.corrcoef(rx, ry)[0, 1], abs=1e-9)
    assert math.isnan(bounded(z, P, X, pairs, float((P @ z) @ (P @ z)))[0])


def test_disattenuate_divides_by_the_attenuation_and_opens_a_side_its_low_end_cannot_bound():
    est, lo, hi = disattenuate(0.2, 0.1, 0.25, 0.5, 0.5, 0.36, 0.36, 0.81, 0.81)
    # the estimate over sqrt(rel_x rel_y); the low end over the largest attenuation, the high over the least
    assert est == pytest.approx(0.4) and lo == pytest.approx(0.1 / 0.81) and hi == pytest.approx(0.25 / 0.36)
    assert disattenuate(0.2, 0.1, 0.3, 0.5, 0.5, 0.25, 0.25, 0.81, 0.81)[2] == 1.0  # 0.3 / 0.25 past 1: 1
    est, lo, hi = disattenuate(0.1, -0.2, 0.4, 0.3, 0.3, 0.0, 0.2, 1.0, 1.0)
    assert (lo, hi) == (-1.0, 1.0)  # the attenuation may be 0: nothing bounds either side
    # a series whose reliability is below 0 even at its high end (WNLI's in config/real-cpu.yaml): the
    # interval is the whole range, not [+1, +1] from dividing a positive low end by 0
    est, lo, hi = disattenuate(0.645, 0.027, 0.907, 0.75, -2.5, 0.1, -4.0, 1.0, -1.0)
    assert math.isnan(est) and (lo, hi) == (-1.0, 1.0)


def test_halves_of_a_set_sampled_per_label_take_half_of_each_label():
    # 100 items of each label; checkpoints that swing between predicting one label and the other: a
    # random half's accuracy then moves with its share of each label, a per-label half's does not
    rng = np.random.default_rng(3)
    labels = np.repeat(["entailment", "non-entailment"], 100)
    bias = np.linspace(0.05, 0.95, 12)
    says_yes = rng.random((12, 200)) < bias[:, None]
    mat = (says_yes == (labels == "entailment")[None, :]).astype(float)
    h_random, _ = half_means(mat, 50, np.random.default_rng(4))
    h_label, _ = half_means(mat, 50, np.random.default_rng(4), labels)
    for k in range(50):
        first = h_label[k, 0]
        assert np.allclose(first + h_label[k, 1], 2 * mat.mean(1))  # equal halves of the whole set
    # the two halves' difference: its spread across checkpoints is what the noise estimate reads
    spread_random = np.mean(np.var(h_random[:, 0] - h_random[:, 1], axis=1))
    spread_label = np.mean(np.var(h_label[:, 0] - h_label[:, 1], axis=1))
    assert spread_label < 0.75 * spread_random  # here 0.57 of it


def test_item_labels_are_read_in_the_matrices_column_order():
    from oodcorr.analysis.items.item_noise import item_strata

    ex = pd.DataFrame(
        {
            "unit": [0, 0, 0, 1, 1, 1],
            "testset": ["a"] * 6,
            "example": [3, 1, 2, 1, 2, 3],
            "correct": [1, 0, 1, 1, 1, 0],
            "stratum": ["n", "y", "y", "y", "y", "n"],
        }
    )
    mats, _ = item_matrices(ex, [0, 1])
    assert item_strata(ex, mats)["a"].tolist() == ["y", "y", "n"]  # examples 1, 2, 3
    two = ex.assign(stratum=["n", "y", "y", "y", "n", "n"])  # example 2 has two labels: none read
    assert item_strata(two, mats) == {}
