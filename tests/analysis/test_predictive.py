"""The two statements across models (oodcorr.analysis.across.predictive): the prediction interval (the
Bayesian random-effects predictive, against a direct numerical integral, its limits, the within
scales, the batch and one-study paths, its coverage on a seeded simulation) and the tolerance
bounds that ``generalises`` reads (against a direct integral of the Q-profile confidence
distribution, their equivariance, the known-spread limit, and their error rates on seeded
normal studies)."""

import math

import numpy as np
import pytest
from scipy import integrate, optimize, stats

from oodcorr.analysis.across.predictive import (
    _side_mass,
    predictive_batch,
    tau_confidence_batch,
    tolerance_batch,
    within_scale_draws,
)

from helpers import consensus, predictive, tolerance


def _quad_cdf(x, zm, Vm, scale, lams=(1.0,)):
    """P(theta_new <= x | data) by adaptive quadrature over tau, straight from the model: half-normal
    prior on tau, flat on mu, the within variance lambda V_m with lambda uniform on ``lams``, mu and
    theta_new integrated out in closed form given (lambda, tau)."""
    zm, Vm = np.asarray(zm, float), np.asarray(Vm, float)
    num = den = 0.0
    for lam in lams:
        a, b = _quad_parts(x, zm, lam * Vm, scale)
        num, den = num + a, den + b
    return num / den


def _quad_parts(x, zm, Vm, scale):
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
    return num, den


@pytest.mark.parametrize(
    "zm, Vm",
    [
        (np.array([-0.4, -0.5, -0.3, -0.6]), np.full(4, 0.02)),  # equal variances
        (np.array([-0.9, -0.2, 0.1, -0.5, -0.6, 0.3]), np.array([0.05, 0.2, 0.1, 0.02, 0.3, 0.15])),
    ],
)
@pytest.mark.parametrize("lams", [(1.0,), (0.5, 0.6, 0.7, 0.8, 0.9, 1.0)])
def test_interval_is_the_quadrature_of_the_posterior_predictive(zm, Vm, lams):
    c = predictive(zm, Vm, 0.95, tau_scale=0.5, within_scales=lams)
    lo = optimize.brentq(lambda x: _quad_cdf(x, zm, Vm, 0.5, lams) - 0.025, -5, 5, xtol=1e-10)
    hi = optimize.brentq(lambda x: _quad_cdf(x, zm, Vm, 0.5, lams) - 0.975, -5, 5, xtol=1e-10)
    assert c["pi_lo"] == pytest.approx(lo, abs=2e-4) and c["pi_hi"] == pytest.approx(hi, abs=2e-4)
    f0 = _quad_cdf(0.0, zm, Vm, 0.5, lams)
    assert c["p_predictive"] == pytest.approx(2 * min(f0, 1 - f0), rel=1e-3)


def test_a_smaller_within_variance_widens_the_interval():
    # the within scales below 1 leave more of the models' spread to tau: never narrower than V_m as given
    zm, Vm = np.array([-0.4, -0.7, -0.1, -0.6, -0.3, -0.5]), np.full(6, 0.05)
    given, scaled = predictive(zm, Vm, within_scales=(1.0,)), predictive(zm, Vm)
    assert scaled["pi_hi"] - scaled["pi_lo"] > given["pi_hi"] - given["pi_lo"]
    assert scaled["tau"] > given["tau"]


def test_p_predictive_is_where_the_interval_reaches_zero():
    zm, Vm = np.array([-0.4, -0.5, -0.3, -0.6, -0.2]), np.full(5, 0.03)
    p = predictive(zm, Vm)["p_predictive"]
    assert 0 < p < 1
    assert predictive(zm, Vm, level=1 - p)["pi_hi"] == pytest.approx(0.0, abs=1e-7)


def test_a_zero_prior_scale_is_the_fixed_effect_interval():
    zm, Vm = np.array([-0.4, -0.5, -0.3, -0.6]), np.full(4, 0.02)
    c = predictive(zm, Vm, 0.95, tau_scale=0.0, within_scales=(1.0,))
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
    assert many["p_predictive"] < few["p_predictive"]


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
        for k in ("pi_lo", "pi_hi", "p_predictive", "tau"):
            assert got[k][i] == pytest.approx(one[k], rel=1e-9, abs=1e-8, nan_ok=True)
    assert np.isnan(got["pi_lo"][3]) and np.isfinite(got["pi_lo"][2])
    tol = tolerance_batch(np.where(present, zm, np.nan), np.where(present, Vm, np.nan), present)
    for i in range(5):
        one = tolerance(zm[i][present[i]], Vm[i][present[i]])
        for k in ("tol_lo", "tol_hi", "p_low_side", "p_high_side", "p_generalises"):
            assert tol[k][i] == pytest.approx(one[k], rel=1e-9, abs=1e-8, nan_ok=True)
    assert np.isnan(tol["tol_hi"][3]) and np.isfinite(tol["tol_hi"][2])
    # the consensus reports the same interval, and the bounds of the V_m at its within scale
    c = consensus(zm[0], Vm[0])
    scaled = tolerance(zm[0], c["within_scale"] * Vm[0])
    assert (c["pi_lo"], c["tol_hi"], c["p_generalises"]) == (
        pytest.approx(got["pi_lo"][0]),
        pytest.approx(scaled["tol_hi"]),
        pytest.approx(scaled["p_generalises"]),
    )


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


# ---- the tolerance bounds ---------------------------------------------------------------------
def _quad_high_side(zm, Vm, level=0.95):
    """The confidence distribution's mass on mu + c tau >= 0, straight from its definition: H(tau) =
    P(chi2_{M-1} >= Q(tau)) has a mass H(0) at 0 and the density dH/dtau above it (by finite
    differences of the exact H), and given tau, mu's confidence distribution is N(mu(tau), V(tau))."""
    zm, Vm = np.asarray(zm, float), np.asarray(Vm, float)
    c = stats.norm.ppf((1 + level) / 2)

    def parts(t):
        w = 1 / (Vm + t * t)
        mu = (w * zm).sum() / w.sum()
        return mu, math.sqrt(1 / w.sum()), (w * (zm - mu) ** 2).sum()

    def H(t):
        return stats.chi2.sf(parts(t)[2], len(zm) - 1)

    def g(t):
        mu, se, _ = parts(t)
        return stats.norm.cdf((mu + c * t) / se)

    def f(t, h=1e-6):
        return g(t) * (H(t + h) - H(max(t - h, 0.0))) / (t + h - max(t - h, 0.0))

    return H(0.0) * g(0.0) + integrate.quad(f, 0, 5, epsabs=1e-12, limit=400)[0]


@pytest.mark.parametrize(
    "zm, Vm",
    [
        (np.array([-0.4, -0.5, -0.3, -0.6, -0.45]), np.full(5, 0.02)),
        (np.array([-0.9, -0.2, 0.1, -0.5, -0.6, 0.3]), np.array([0.05, 0.2, 0.1, 0.02, 0.3, 0.15])),
    ],
)
def test_tolerance_is_the_integral_of_the_confidence_distribution(zm, Vm):
    t = tolerance(zm, Vm)
    assert t["p_high_side"] == pytest.approx(_quad_high_side(zm, Vm), abs=5e-4)
    # and the low side is the high side of the mirrored models
    assert t["p_low_side"] == pytest.approx(tolerance(-zm, Vm)["p_high_side"], rel=1e-9)
    assert t["p_generalises"] == min(t["p_low_side"], t["p_high_side"])


def test_a_bound_at_zero_is_where_generalises_is_just_claimed():
    # the bounds move with the models (Q, and so tau's confidence distribution, do not): shifting the
    # models by -tol_hi puts the bound at 0, where its side's mass, and p, are 1 - level
    zm, Vm = np.array([-0.4, -0.5, -0.3, -0.6, -0.2, -0.55]), np.full(6, 0.03)
    t = tolerance(zm, Vm)
    assert t["tol_lo"] < t["tol_hi"]
    shifted = tolerance(zm - t["tol_hi"], Vm)
    assert shifted["tol_hi"] == pytest.approx(0.0, abs=1e-7)
    assert shifted["p_high_side"] == pytest.approx(0.05, abs=1e-6)
    assert shifted["p_generalises"] == pytest.approx(0.05, abs=1e-6)


def test_the_share_shown_is_where_the_bound_reaches_zero():
    # share_low: the largest share of models whose sign is shown at confidence 0.95; at its normal
    # quantile the side's mass is 0.05, and a smaller share is shown with room to spare
    zm, Vm = np.array([-0.4, -0.5, -0.3, -0.6, -0.2, -0.55]), np.full(6, 0.03)
    t = tolerance(zm, Vm)
    assert 0.5 < t["share_low"] < 0.9999 and t["p_high_side"] < t["p_low_side"]
    cd = tau_confidence_batch(zm[None], Vm[None], np.ones((1, 6), bool), 201)
    args = (cd["weight"], cd["mu"], np.sqrt(cd["var"]), cd["tau"], np.array([True]))
    at = _side_mass(np.array([stats.norm.ppf(t["share_low"])]), *args)[0]
    assert at == pytest.approx(0.05, abs=1e-5)
    assert _side_mass(np.array([stats.norm.ppf(t["share_low"] - 0.05)]), *args)[0] < 0.05
    # the models' median sign not shown: no share
    assert math.isnan(tolerance(np.array([0.1, -0.2, 0.05, -0.1]), np.full(4, 0.05))["share_low"])


def test_with_a_known_spread_the_bounds_are_its_quantiles():
    # 4000 models measured almost exactly, spread as N(-0.3, 0.2^2): the bounds are the 95 % confidence
    # bounds of mu -+ c tau, which is estimated with sd sqrt(tau^2 / M + c^2 tau^2 / (2 M)) (large-M)
    M, tau = 4000, 0.2
    zm = -0.3 + tau * stats.norm.ppf((np.arange(M) + 0.5) / M)
    t = tolerance(zm, np.full(M, 1e-6))
    c = stats.norm.ppf(0.975)
    sd = math.sqrt(tau**2 / M + c * c * tau**2 / (2 * M))
    z95 = stats.norm.ppf(0.95)
    assert t["tol_hi"] == pytest.approx(-0.3 + c * tau + z95 * sd, abs=0.001)
    assert t["tol_lo"] == pytest.approx(-0.3 - c * tau - z95 * sd, abs=0.001)
    # and the prediction interval, for one further model, is about the same range
    p = predictive(zm, np.full(M, 1e-6))
    assert (p["pi_lo"], p["pi_hi"]) == (pytest.approx(t["tol_lo"], abs=0.03), pytest.approx(t["tol_hi"], abs=0.03))


def _normal_studies(seed, S, M, mu, tau, v):
    rng = np.random.default_rng(seed)
    zm = mu + tau * rng.normal(size=(S, M)) + math.sqrt(v) * rng.normal(size=(S, M))
    return zm, np.full((S, M), v), np.ones((S, M), bool)


@pytest.mark.parametrize("M, v", [(6, 0.03), (16, 0.15)])
def test_generalises_at_the_sign_boundary_is_rare_and_a_shared_value_is_found(M, v):
    # normal studies with the within variance known: at the boundary (a further model of the other
    # sign with probability 0.025: mu = -1.96 tau) p < 0.05 in at most 0.05 of studies (with these
    # seeds 0.048 and 0.056), where the prediction interval excludes 0 in a fifth of them (0.205,
    # 0.193); with no spread the claim is made
    c = stats.norm.ppf(0.975)
    S = 2000
    zm, Vm, ok = _normal_studies(30, S, M, -0.55, 0.55 / c, v)
    rate = np.mean(tolerance_batch(zm, Vm, ok)["p_generalises"] < 0.05)
    interval = np.mean(predictive_batch(zm, Vm, ok)["p_predictive"] < 0.05)
    assert rate <= 0.05 + 2 * math.sqrt(0.05 * 0.95 / S) and interval > 0.15
    zm, Vm, ok = _normal_studies(31, S, M, -0.55, 0.0, v / 4)
    assert np.mean(tolerance_batch(zm, Vm, ok)["p_generalises"] < 0.05) > 0.5


@pytest.mark.parametrize("M, K", [(6, 3), (10, 2)])
def test_with_runs_the_within_variance_is_read_from_their_scatter(M, K):
    # normal studies whose per-run variances are reported three times too large: the runs' own
    # scatter sets the scale, so at the boundary the claim stays about as rare as with the variances
    # known (the tolerance bounds' own error with 10 models is about 0.057), where the fixed scale of
    # one run per model (0.72) credits part of the spread to noise and claims it too often
    from oodcorr.analysis.across.consensus import shared_sign_batch, within_runs_batch

    c, S, v_true = stats.norm.ppf(0.975), 1500, 0.06
    rng = np.random.default_rng(37)
    theta = -0.55 + 0.55 / c * rng.normal(size=(S, M, 1))
    z = theta + math.sqrt(v_true) * rng.normal(size=(S, M, K))
    v, mask = np.full((S, M, K), 3 * v_true), np.ones((S, M, K), bool)
    zbar, Vbar, ss, df = within_runs_batch(z, v, mask)
    runs = shared_sign_batch(zbar, Vbar, mask.any(-1), ss, df)
    fixed = shared_sign_batch(zbar, Vbar, mask.any(-1), ss, np.zeros(S, int))
    from_runs, from_fixed = np.mean(runs["p_generalises"] < 0.05), np.mean(fixed["p_generalises"] < 0.05)
    assert from_runs <= 0.065 and from_fixed > from_runs + 0.02  # 0.052, 0.073 and 0.061, 0.105 with this seed
    assert np.median(runs["within_scale"]) == pytest.approx(1 / 3, abs=0.05)  # the scatter's estimate


def test_the_within_scale_draws():
    draws, weights = within_scale_draws(np.array([12.0, 5.0]), np.array([12, 0]))
    assert weights.sum(-1) == pytest.approx([1.0, 1.0])
    # with runs: the fiducial distribution ss / chi2_df (its median about 12 / 11.34), truncated at 1
    assert draws[0].max() == 1.0 and draws[0].min() == pytest.approx(12 / stats.chi2.ppf(0.966, 12), rel=0.05)
    assert np.all(np.diff(draws[0]) <= 0)
    # without: the per-run procedure's scale alone
    assert draws[1, 0] == 0.72 and weights[1, 0] == 1.0 and (weights[1, 1:] == 0).all()
