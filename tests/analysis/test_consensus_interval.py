"""The prediction interval across models (oodcorr.analysis.consensus.predictive): the Bayesian
random-effects predictive against a direct numerical integral, its limits, the batch and the
one-study paths, and its coverage on a seeded simulation."""

import math

import numpy as np
import pytest
from scipy import integrate, optimize, stats

from oodcorr.analysis.consensus import consensus, predictive, predictive_batch


def _quad_cdf(x, zm, Vm, scale):
    """P(theta_new <= x | data) by adaptive quadrature over tau, straight from the model: half-normal
    prior on tau, flat on mu, mu and theta_new integrated out in closed form given tau."""
    zm, Vm = np.asarray(zm, float), np.asarray(Vm, float)

    def parts(t):
        w = 1 / (Vm + t * t)
        mu = (w * zm).sum() / w.sum()
        log_post = -0.5 * (t / scale) ** 2 + 0.5 * (np.log(w).sum() - np.log(w.sum()) - (w * (zm - mu) ** 2).sum())
        return math.exp(log_post), mu, math.sqrt(1 / w.sum() + t * t)

    def f(t, with_cdf):
        dens, mu, sd = parts(t)
        return dens * (stats.norm.cdf((x - mu) / sd) if with_cdf else 1.0)

    top = 12 * scale
    num = integrate.quad(f, 0, top, args=(True,), epsabs=0, epsrel=1e-10, limit=200)[0]
    den = integrate.quad(f, 0, top, args=(False,), epsabs=0, epsrel=1e-10, limit=200)[0]
    return num / den


@pytest.mark.parametrize(
    "zm, Vm",
    [
        (np.array([-0.4, -0.5, -0.3, -0.6]), np.full(4, 0.02)),  # equal variances
        (np.array([-0.9, -0.2, 0.1, -0.5, -0.6, 0.3]), np.array([0.05, 0.2, 0.1, 0.02, 0.3, 0.15])),
    ],
)
def test_interval_is_the_quadrature_of_the_posterior_predictive(zm, Vm):
    c = predictive(zm, Vm, 0.95, tau_scale=0.5)
    lo = optimize.brentq(lambda x: _quad_cdf(x, zm, Vm, 0.5) - 0.025, -5, 5, xtol=1e-10)
    hi = optimize.brentq(lambda x: _quad_cdf(x, zm, Vm, 0.5) - 0.975, -5, 5, xtol=1e-10)
    assert c["pi_lo"] == pytest.approx(lo, abs=2e-4) and c["pi_hi"] == pytest.approx(hi, abs=2e-4)
    f0 = _quad_cdf(0.0, zm, Vm, 0.5)
    assert c["p_generalises"] == pytest.approx(2 * min(f0, 1 - f0), rel=1e-3)


def test_p_generalises_is_where_the_interval_reaches_zero():
    zm, Vm = np.array([-0.4, -0.5, -0.3, -0.6, -0.2]), np.full(5, 0.03)
    p = predictive(zm, Vm)["p_generalises"]
    assert 0 < p < 1
    assert predictive(zm, Vm, level=1 - p)["pi_hi"] == pytest.approx(0.0, abs=1e-7)


def test_a_zero_prior_scale_is_the_fixed_effect_interval():
    zm, Vm = np.array([-0.4, -0.5, -0.3, -0.6]), np.full(4, 0.02)
    c = predictive(zm, Vm, 0.95, tau_scale=0.0)
    half = stats.norm.ppf(0.975) * math.sqrt(0.02 / 4)
    assert (c["pi_lo"], c["pi_hi"]) == (pytest.approx(-0.45 - half, abs=1e-8), pytest.approx(-0.45 + half, abs=1e-8))
    # and a larger prior scale is never narrower, on the same models
    widths = [predictive(zm, Vm, 0.95, s) for s in (0.0, 0.1, 0.3, 0.5, 1.0)]
    w = [c["pi_hi"] - c["pi_lo"] for c in widths]
    assert all(b > a for a, b in zip(w, w[1:]))


def test_more_models_of_the_same_kind_narrow_it():
    zm, Vm = np.array([-0.4, -0.55, -0.3, -0.6]), np.full(4, 0.04)
    few, many = predictive(zm, Vm), predictive(np.tile(zm, 4), np.tile(Vm, 4))
    assert many["pi_hi"] - many["pi_lo"] < few["pi_hi"] - few["pi_lo"]
    assert many["p_generalises"] < few["p_generalises"]


def test_batch_and_one_study_agree():
    rng = np.random.default_rng(3)
    zm = rng.normal(-0.3, 0.4, size=(5, 7))
    Vm = rng.uniform(0.01, 0.3, size=(5, 7))
    present = np.ones((5, 7), bool)
    present[1, 4:] = False  # 4 models
    present[2, 3:] = False  # 3 models
    present[3, 2:] = False  # 2 models: no interval
    got = predictive_batch(np.where(present, zm, np.nan), np.where(present, Vm, np.nan), present)
    for i in range(5):
        one = predictive(zm[i][present[i]], Vm[i][present[i]])
        for k in ("pi_lo", "pi_hi", "p_generalises", "tau"):
            assert got[k][i] == pytest.approx(one[k], rel=1e-9, abs=1e-8, nan_ok=True)
    assert np.isnan(got["pi_lo"][3]) and np.isfinite(got["pi_lo"][2])
    # the consensus reports the same interval
    c = consensus(zm[0], Vm[0])
    assert (c["pi_lo"], c["p_generalises"]) == (pytest.approx(got["pi_lo"][0]), pytest.approx(got["p_generalises"][0]))


def test_coverage_of_a_further_model_on_a_seeded_simulation():
    # 400 studies of 6 models, each known to within sd 0.2, true spread 0.3 around -0.3 (z scale):
    # 0.9675 with this seed (a bound far below it: the check is that the interval is not too narrow)
    rng = np.random.default_rng(30)
    S, M, tau = 400, 6, 0.3
    theta = -0.3 + tau * rng.normal(size=(S, M))
    zm = theta + 0.2 * rng.normal(size=(S, M))
    new = -0.3 + tau * rng.normal(size=S)
    got = predictive_batch(zm, np.full((S, M), 0.04), np.ones((S, M), bool))
    cover = np.mean((got["pi_lo"] <= new) & (new <= got["pi_hi"]))
    assert cover > 0.9
