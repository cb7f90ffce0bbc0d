"""Where a further model of the table's kind is expected: the two statements across models."""

from __future__ import annotations

import numpy as np
from scipy import special, stats
from scipy.optimize import elementwise

from .pooling import cochran_q, solve_tau2

# the between-model sd's prior: half-normal of this scale on the Fisher z scale
TAU_SCALE = 0.5
TAU_POINTS = 161  # grid points of tau for the prediction interval
TOL_POINTS = 201  # ... and for the tolerance bounds (their p to 3e-4 of a direct integral)
TOL_POINTS_P = 101  # ... for their p-values alone, where no bound is reported (the design's studies: to 3e-3)
# the within-model variance is lambda V_m, lambda uniform on these (the prediction interval only)
WITHIN_SCALES = (0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
CHUNK = 256  # studies per (studies, grid, models) array
FIDUCIAL_POINTS = 6  # Gauss nodes of the within scale's fiducial distribution the tolerance bounds integrate over
# every model one run: the share of V_m the bounds read
# (benchmarks/README.md#14-the-answer-across-models-every-rung-measured)
SINGLE_RUN_SCALE = 0.72


def tau2_upper_batch(zm, Vm, present, level: float = 0.95) -> np.ndarray:
    """The Q-profile upper confidence bound of the between-model variance (Viechtbauer 2007) per study; 0 where Q
    is below its chi-square quantile already at 0, NaN for fewer than 2 models."""
    k = present.sum(-1)
    target = stats.chi2.ppf((1 - level) / 2, np.maximum(k - 1, 1))
    t2 = solve_tau2(zm[:, None], Vm[:, None], present[:, None], target)
    return np.where(k >= 2, t2, np.nan)


def within_scale_batch(zm, Vm, present, level: float = 0.95) -> np.ndarray:
    """Per study, the scale the within-model variances get (below 1 where the models' Q is in its lower tail)."""
    k = present.sum(-1)
    q, _ = cochran_q(zm, Vm, present)
    with np.errstate(invalid="ignore", divide="ignore"):
        p_low = stats.chi2.cdf(q, np.maximum(k - 1, 1))
        scale = np.where(p_low < (1 - level) / 2, np.clip(q / np.maximum(k - 1, 1), 1e-6, 1.0), 1.0)
    return np.where(k >= 3, scale, np.nan)


def _grid(y, v, present, floor: float, points: int) -> np.ndarray:
    """(studies, points) values of tau from 0 to ``floor`` or 1.5 times the 99.9 % Q-profile upper
    bound, whichever is larger: all of tau's posterior or confidence distribution but a negligible tail."""
    hi = np.sqrt(np.nan_to_num(tau2_upper_batch(y, v, present, 0.999), nan=0.0))
    return np.maximum(floor, 1.5 * hi)[:, None] * np.linspace(0.0, 1.0, points)[None, :]


def _profile(y, v, present, tau) -> tuple[np.ndarray, ...]:
    """At each grid point tau: ``mu(tau)`` (the inverse-variance mean), ``V(tau) = 1 / sum w``,
    the generalised ``Q(tau)`` and ``sum log w`` (``w = 1 / (V_m + tau^2)``); each (studies, points)."""
    w = np.where(present[:, None, :], 1 / (v[:, None, :] + tau[:, :, None] ** 2), 0.0)
    sw = w.sum(-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        mu = (w * y[:, None, :]).sum(-1) / sw
        q = (w * (y[:, None, :] - mu[..., None]) ** 2).sum(-1)
        logw = np.where(present[:, None, :], np.log(np.where(w > 0, w, 1.0)), 0.0).sum(-1)
    return mu, 1 / sw, q, logw


def _tau_posterior_batch(zm, Vm, present, tau_scale: float, within_scales) -> dict:
    """The posterior of (lambda, tau) on a grid, per study: a flat prior on ``mu``, a half-normal
    prior of scale ``tau_scale`` on ``tau`` and ``lambda`` uniform on ``within_scales`` (model m's
    within variance ``lambda V_m``)."""
    y = np.where(present, zm, 0.0)
    v = np.where(present, Vm, 1.0)
    tau = _grid(y, min(within_scales) * v, present, 6 * tau_scale, TAU_POINTS)
    parts = {"log": [], "mu": [], "var": []}
    for lam in within_scales:
        mu, var, q, logw = _profile(y, lam * v, present, tau)
        with np.errstate(invalid="ignore", divide="ignore"):
            log_post = 0.5 * (logw + np.log(var) - q)
            if tau_scale > 0:
                log_post = log_post - 0.5 * (tau / tau_scale) ** 2
            else:
                log_post = np.where(tau > 0, -np.inf, log_post)
        parts["log"].append(log_post)
        parts["mu"].append(mu)
        parts["var"].append(var)
    log_post = np.concatenate(parts["log"], axis=-1)
    log_post = log_post - np.max(log_post, axis=-1, keepdims=True)
    trapezoid = np.ones(TAU_POINTS)
    trapezoid[[0, -1]] = 0.5
    mass = np.exp(log_post) * np.tile(trapezoid, len(within_scales))
    mass = mass / mass.sum(-1, keepdims=True)
    return {
        "tau": np.tile(tau, (1, len(within_scales))),
        "weight": mass,
        "mu": np.concatenate(parts["mu"], axis=-1),
        "var": np.concatenate(parts["var"], axis=-1),
    }


def tau_confidence_batch(zm, Vm, present, points: int = TOL_POINTS) -> dict:
    """The Q-profile confidence distribution of ``tau`` on a grid, per study, as mixture weights: ``H(tau) =
    P(chi2_{M-1} >= Q(tau))`` rises from its mass at 0 to 1, each grid interval's mass split between its ends."""
    y = np.where(present, zm, 0.0)
    v = np.where(present, Vm, 1.0)
    k = present.sum(-1)
    tau = _grid(y, v, present, 0.0, points)  # no prior: the grid is the confidence distribution's range
    mu, var, q, _ = _profile(y, v, present, tau)
    H = stats.chi2.sf(q, np.maximum(k - 1, 1)[:, None])
    H = np.maximum.accumulate(np.nan_to_num(H, nan=1.0), axis=-1)  # Q falls with tau; guard rounding
    H[:, -1] = 1.0
    dH = np.diff(H, axis=-1)
    weight = np.zeros_like(H)
    weight[:, 0] = H[:, 0]
    weight[:, :-1] += dH / 2
    weight[:, 1:] += dH / 2
    return {"tau": tau, "weight": weight, "mu": mu, "var": var}


def _mixture_quantile(p: float, wt, mu, sd, tol: float = 1e-10) -> np.ndarray:
    """Per row, the ``p`` quantile of the mixture of normals ``N(mu, sd^2)`` with weights ``wt``, to ``tol``."""

    def excess(x, rows):
        rows = rows.astype(int)
        return (wt[rows] * special.ndtr((x[:, None] - mu[rows]) / sd[rows])).sum(-1) - p

    own = mu + sd * special.ndtri(p)
    bracket = ((own - 0.01 * sd).min(-1), (own + 0.01 * sd).max(-1))
    rows = np.arange(len(wt), dtype=float)
    return elementwise.find_root(excess, bracket, args=(rows,), tolerances={"xatol": tol, "xrtol": 0.0}).x


def _chunks(present):
    idx = np.flatnonzero(np.asarray(present, dtype=bool).sum(-1) >= 3)
    for s in range(0, len(idx), CHUNK):
        yield idx[s : s + CHUNK]


def predictive_batch(
    zm, Vm, present, level: float = 0.95, tau_scale: float = TAU_SCALE, within_scales=WITHIN_SCALES
) -> dict:
    """Per study: the prediction interval for a further model's correlation (z scale), the central ``level``
    interval of the posterior predictive, a mixture over the grid of normals ``N(mu(tau), V(tau) + tau^2)``."""
    out = {k: np.full(present.shape[0], np.nan) for k in ("pi_lo", "pi_hi", "p_predictive", "tau")}
    for i in _chunks(present):
        post = _tau_posterior_batch(zm[i], Vm[i], present[i], tau_scale, within_scales)
        wt, mu, sd = post["weight"], post["mu"], np.sqrt(post["var"] + post["tau"] ** 2)
        out["pi_lo"][i] = _mixture_quantile((1 - level) / 2, wt, mu, sd)
        out["pi_hi"][i] = _mixture_quantile((1 + level) / 2, wt, mu, sd)
        f0 = (wt * special.ndtr(-mu / sd)).sum(-1)
        out["p_predictive"][i] = np.minimum(1.0, 2 * np.minimum(f0, 1 - f0))
        out["tau"][i] = (wt * post["tau"]).sum(-1)
    return out


def within_scale_draws(ss, df):
    """The within-model scale ``lambda`` the tolerance bounds integrate over, per study, as (draws, weights)."""
    ss, df = np.asarray(ss, float), np.asarray(df, int)
    draws = np.full((len(ss), FIDUCIAL_POINTS), SINGLE_RUN_SCALE)
    weights = np.zeros((len(ss), FIDUCIAL_POINTS))
    weights[:, 0] = 1.0
    x, w = special.roots_legendre(FIDUCIAL_POINTS)  # Gauss-Legendre on the fiducial distribution's probability scale
    u = (x + 1) / 2
    for d in np.unique(df[df > 0]):
        rows = df == d
        draws[rows] = np.minimum(ss[rows, None] / stats.chi2.ppf(u, d)[None, :], 1.0)
        weights[rows] = w / w.sum()
    return draws, weights


def _side_mass(c, wt, mu, sd, tau, high) -> np.ndarray:
    """The confidence distribution's mass on ``mu + c tau >= 0`` where ``high``, else on ``mu - c tau <= 0``."""
    sign = np.where(high, 1.0, -1.0)[:, None]
    return np.minimum(1.0, (wt * special.ndtr((sign * mu + np.asarray(c, float)[:, None] * tau) / sd)).sum(-1))


def _largest_share(wt, mu, sd, tau, high, alpha: float) -> np.ndarray:
    """Per row, the largest share ``s`` in [0.5, 0.9999] at which the bound on the row's side still excludes 0."""
    top = float(stats.norm.ppf(0.9999))
    n = len(wt)
    at0 = _side_mass(np.zeros(n), wt, mu, sd, tau, high)
    at_top = _side_mass(np.full(n, top), wt, mu, sd, tau, high)
    c = np.full(n, top)  # where even the top share's bound excludes 0
    solve = np.flatnonzero((at0 <= alpha) & (at_top > alpha))
    if len(solve):

        def excess(c, rows):
            rows = rows.astype(int)
            return _side_mass(c, wt[rows], mu[rows], sd[rows], tau[rows], high[rows]) - alpha

        found = elementwise.find_root(
            excess, (0.0, top), args=(solve.astype(float),), tolerances={"xatol": 1e-6, "xrtol": 0.0}
        )
        c[solve] = found.x
    return np.where(at0 <= alpha, special.ndtr(c), np.nan)


def tolerance_batch(zm, Vm, present, level: float = 0.95, scales=None, bounds: bool = True) -> dict:
    """Per study: the one-sided tolerance bounds ``tol_lo``, ``tol_hi`` of the models' correlations (z scale)."""
    S = present.shape[0]
    points = TOL_POINTS if bounds else TOL_POINTS_P
    draws_all, weights_all = (np.ones((S, 1)), np.ones((S, 1))) if scales is None else scales
    c = float(stats.norm.ppf((1 + level) / 2))
    alpha = 1 - level
    keys = ("tol_lo", "tol_hi", "p_low_side", "p_high_side", "share_low")
    out = {k: np.full(S, np.nan) for k in keys}
    for i in _chunks(present):
        draws, weights = draws_all[i], weights_all[i]
        used = np.flatnonzero((weights > 0).any(0))  # every model one run: the first draw alone
        parts = []
        for j in used:
            cd = tau_confidence_batch(zm[i], Vm[i] * draws[:, j][:, None], present[i], points)
            parts.append((cd["weight"] * weights[:, j][:, None], cd["mu"], np.sqrt(cd["var"]), cd["tau"]))
        wt, mu, sd, tau = (np.concatenate(x, axis=-1) for x in zip(*parts))
        cc = np.full(len(i), c)
        low = _side_mass(cc, wt, mu, sd, tau, np.zeros(len(i), bool))
        high = _side_mass(cc, wt, mu, sd, tau, np.ones(len(i), bool))
        out["p_low_side"][i], out["p_high_side"][i] = low, high
        if bounds:
            out["tol_lo"][i] = _mixture_quantile(alpha, wt, mu - c * tau, sd)
            out["tol_hi"][i] = _mixture_quantile(1 - alpha, wt, mu + c * tau, sd)
            out["share_low"][i] = _largest_share(wt, mu, sd, tau, high < low, alpha)
    out["p_generalises"] = np.fmin(out["p_low_side"], out["p_high_side"])
    return out
