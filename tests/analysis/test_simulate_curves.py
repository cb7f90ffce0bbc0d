"""The curved-series generator (oodcorr.analysis.simulate.runs' curve_study): its curves, its noise and its table."""

from __future__ import annotations

import numpy as np
import pytest

from oodcorr.analysis.pipeline import CANON
from oodcorr.analysis.simulate.runs import IN_DOMAIN, Items, ability, curve_study, ood_curve


def _wide(study):
    return study.long.pivot_table(index=["run", "unit"], columns="testset", values="score")


def test_without_noise_every_score_is_an_increasing_function_of_the_ability():
    s = curve_study(np.random.default_rng(1), [0.0] * 5, 3, 40, noise_sd=0.0, family="mixed")
    w = _wide(s)
    assert list(s.long.columns) == CANON
    a = s.ability.reshape(-1)
    assert np.all(np.diff(s.ability, axis=1) > 0)  # every run's ability rises
    z = w[IN_DOMAIN].to_numpy()
    for k in range(4):
        y = w[f"ood{k}"].to_numpy()
        np.testing.assert_allclose(y, s.curves[:, :, k].reshape(-1), atol=1e-12)  # no noise: the curve itself
        for m in range(5):  # runs of one model share the curve: y a nondecreasing function of a and of z
            rows = slice(m * 3 * 40, (m + 1) * 3 * 40)
            order = np.argsort(a[rows])
            assert np.all(np.diff(y[rows][order]) >= -1e-12)
            assert np.all(np.diff(y[rows][np.argsort(z[rows])]) >= -1e-12)


def test_lines_are_lines_in_the_ability_and_curves_are_not():
    lines = curve_study(np.random.default_rng(2), [0.0] * 4, 1, 30, noise_sd=0.0, family="lines")
    curves = curve_study(np.random.default_rng(2), [0.0] * 4, 1, 30, noise_sd=0.0, family="curves")

    def worst_line_misfit(s):
        worst = 0.0
        for b in range(s.ability.shape[0]):
            X = np.column_stack([np.ones(30), s.ability[b]])
            for k in range(4):
                y = s.curves[b, :, k]
                res = y - X @ np.linalg.lstsq(X, y, rcond=None)[0]
                worst = max(worst, float(res @ res / ((y - y.mean()) @ (y - y.mean()))))
        return worst

    assert worst_line_misfit(lines) < 1e-20
    assert worst_line_misfit(curves) > 0.01
    assert set(np.unique(curves.shapes)) <= {"late", "plateau", "s-shape"}


def test_each_curve_runs_from_0_to_1_and_rises():
    a = np.linspace(0, 1, 101)
    for shape, params in (("late", (0.7, 12.0)), ("s-shape", (0.5, 7.0)), ("plateau", (5.0, 0.0)), ("line", (0, 0))):
        f = ood_curve(a, shape, params)
        assert f[0] == pytest.approx(0.0, abs=1e-12) and f[-1] == pytest.approx(1.0)
        assert np.all(np.diff(f) > 0)
    with pytest.raises(ValueError, match="unknown curve shape 'bend'"):
        ood_curve(a, "bend", (0, 0))


def test_ability_stays_in_the_unit_interval():
    a = ability(np.random.default_rng(3), 200, 60)
    assert a.min() >= 0 and a.max() <= 1 and np.all(np.diff(a, axis=1) > 0)


def test_the_planted_correlation_and_phi_hold_over_many_draws():
    # a fixed seed: the estimates are what they are; 5,000 x 60 draws put their sd near 0.005
    e = curve_study(np.random.default_rng(4), [0.5], 5_000, 60, n_ood=3, phi=0.8).noise  # ood0-ood1 correlate 0.5
    flat = e.reshape(-1, 3)
    c = np.corrcoef(flat.T)
    assert c[0, 1] == pytest.approx(0.5, abs=0.02)
    assert c[0, 2] == pytest.approx(0.0, abs=0.02) and c[1, 2] == pytest.approx(0.0, abs=0.02)
    assert flat.std(0) == pytest.approx(np.ones(3), abs=0.02)  # stationary from the first checkpoint
    lag1 = np.mean(e[:, 1:, 0] * e[:, :-1, 0])
    assert lag1 == pytest.approx(0.8, abs=0.02)


def test_the_study_noise_is_the_score_minus_the_curve_and_carries_the_truth():
    s = curve_study(np.random.default_rng(5), [0.5, -0.3], 2, 20, phi=0.3, noise_sd=0.05)
    np.testing.assert_allclose(s.population[:, :, 1:], s.curves + 0.05 * s.noise)
    assert s.truth[0, 0, 1] == 0.5 and s.truth[1, 1, 0] == -0.3 and s.truth[0, 2, 3] == 0.0
    w = _wide(s)
    np.testing.assert_allclose(w["ood1"].to_numpy(), s.population[:, :, 2].reshape(-1))


def test_item_noise_makes_means_over_shared_items():
    items = Items(n_in_domain=50, n_ood=30)
    s = curve_study(np.random.default_rng(6), [0.0, 0.0], 1, 8, n_ood=2, items=items)
    ex = s.examples
    assert ex.groupby("testset")["example"].nunique().to_dict() == {IN_DOMAIN: 50, "ood0": 30, "ood1": 30}
    means = ex.groupby(["run", "unit", "testset"])["correct"].mean()
    got = s.long.set_index(["run", "unit", "testset"])["score"]
    np.testing.assert_allclose(got.loc[means.index].to_numpy(), means.to_numpy())
    assert not np.allclose(s.long.loc[s.long["testset"] == IN_DOMAIN, "score"], s.population[:, :, 0].reshape(-1))


def test_bad_arguments_are_refused():
    rng = np.random.default_rng(7)
    with pytest.raises(ValueError, match="unknown curve family"):
        curve_study(rng, [0.0], 1, 10, family="wiggles")
    with pytest.raises(ValueError, match="0 <= phi < 1"):
        curve_study(rng, [0.0], 1, 10, phi=1.0)
