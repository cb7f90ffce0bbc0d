"""The graded answer across models: every rung's error rates and power, beside the best possible.

agreement.csv states, per OOD pair, the strongest statement the data allow (the ladder of
docs/answer.md#the-answer-across-models): the sign in nearly every model (the tolerance bounds),
the sign on average (the consensus mean), sign reversal, models differ, agree near zero. This
benchmark measures each rung in every regime of the calibration grid: runs per model 1, 2, 3;
models 3, 6, 10, 16; AR(1) phi 0.5, 0.8, 0.95; 27 checkpoints with one run per model, 21 otherwise;
the models' true correlations drawn per study from N(mu, tau^2) on the Fisher z scale, mu 0 or -0.55
(r -0.5), tau 0, 0.15, 0.28 (the boundary of "nearly every model": a further model shares the sign
with probability 0.975) or 0.35. Per regime and rung: the share of studies that state it, and the
share that state it falsely:

* **a sign, on average or stronger**: false where mu = 0 (whatever the spread), or with the sign
  of the other side;
* **the sign in nearly every model**: false wherever a further model shares the sign with
  probability below 0.975 (every mu = 0 regime, and mu -0.55 with tau 0.35); at the boundary it
  should be about 0.05 at most;
* **models differ**: false where tau = 0; **sign reversal**: false where the study's drawn models
  all have one sign; **agree near zero**: false where mu = -0.55.

Beside the power at "every model -0.5", the **best possible** for "nearly every model": the power of
the most powerful test of that alternative against the composite null (every boundary point mu =
-1.96 tau, tau >= 0), told every model's noise: the Neyman-Pearson test against the least
favourable mixture of boundary points, found by iterating the mixture's weights until the test's
size is 0.05 at every point it puts weight on (:func:`least_favourable_power`). No rule whose false
rate is at most 0.05 at every boundary point can do better; the previous bound (issue 30's,
told mu as well) is beside it. And the prediction interval's coverage of a further model.

**Per run** (:func:`per_run_rows`): the per-run procedure's size and coverage at 21 and 27
checkpoints for AR(1) phi 0, 0.5, 0.8, 0.95 and an AR(2) (0.5, 0.3), with E[(z - theta)^2 / se^2]
(1 when the variance it gives is exact) for the shipped modified t and two candidates that read
the residual series' AR(1) coefficient from its restricted likelihood (REML) on a grid instead of
the design-corrected lag-1 estimate (the posterior mean of the variance, and the variance at the
REML estimate).

**A table of 2,000 pairs** (:func:`table_rows`): pairs of the Pythia shape (16 models x 1 run x 27
checkpoints, phi 0.8) with a known mix (half with mu 0, the rest shared or spread values of either
sign), every pair's statements corrected across the table by Holm, Benjamini-Hochberg or not at
all; the false discovery proportion of the sign statements (and of "nearly every model") and the
share of true signs found, over repeated tables.

Studies are simulated and analysed by the design command's two steps (oodcorr.analysis.design.power),
which give the full pipeline's verdict on the same draws (benchmarks/design_agreement.py).
Monte Carlo standard error sqrt(p (1 - p) / studies) beside every share.

    .venv/bin/python benchmarks/answer_calibration.py --out benchmarks/latest/answer_calibration.json
    .venv/bin/python benchmarks/answer_calibration.py --out benchmarks/latest/answer_calibration.json --markdown
Tables: benchmarks/README.md#14-the-answer-across-models-every-rung-measured.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
from scipy import special, stats

from oodcorr.analysis.across import multitest
from oodcorr.analysis.across.consensus import consensus_batch, verdict
from oodcorr.analysis.cell.inference import ar1_corr
from oodcorr.analysis.cell.residualise import linear_maker
from oodcorr.analysis.design.power import Assumptions, Grid, Settings, simulate_runs, studies_of, verdicts_of
from oodcorr.analysis.simulate.runs import run_scores
from oodcorr.core.answer import NEARLY_EVERY, ON_AVERAGE

SETTINGS = Settings()
MODELS = (3, 6, 10, 16)
RUNS = (1, 2, 3)
PHIS = (0.5, 0.8, 0.95)
SPREADS = ((0.0, 0.0), (0.0, 0.15), (0.0, 0.35), (-0.55, 0.0), (-0.55, 0.15), (-0.55, 0.28), (-0.55, 0.35))
BOUNDARY = (-0.55, 0.28)
C975 = float(stats.norm.ppf(0.975))


def share(x) -> dict:
    x = np.asarray(x, dtype=float)
    p = float(np.mean(x)) if len(x) else math.nan
    return {"share": p, "se": math.sqrt(p * (1 - p) / len(x)) if len(x) else math.nan}


def truths(grid: Grid, mu: float, tau: float, studies: int, key) -> np.ndarray:
    """The models' true z of each simulated study: :func:`.design.simulate_runs` draws them first
    from the same generator, so replaying its first draw gives them."""
    return mu + tau * np.random.default_rng(key).normal(size=(studies, grid.models))


def rung_flags(words) -> dict:
    """Per verdict: which statements it makes."""
    w = np.asarray(words, dtype=object)

    def has(text):
        return np.array([text in x for x in w], dtype=bool)

    return {
        "nearly_neg": has(f"negative {NEARLY_EVERY}"),
        "nearly_pos": has(f"positive {NEARLY_EVERY}"),
        "sign_neg": has(f"negative {NEARLY_EVERY}") | has(f"negative {ON_AVERAGE}"),
        "sign_pos": has(f"positive {NEARLY_EVERY}") | has(f"positive {ON_AVERAGE}"),
        "reversal": has("sign reversal"),
        "differ": has("models differ"),
        "near": has("agree near zero") | has("near zero"),
    }


def regime(grid: Grid, phi: float, mu: float, tau: float, studies: int, seed: int) -> tuple[dict, dict]:
    """One regime's shares of every statement, false or not, and the studies' runs."""
    key = [seed, grid.models, grid.runs, grid.checkpoints, round(1000 * phi)]
    a = Assumptions(phi=phi, model_sd=tau)
    runs = simulate_runs(grid, a, math.tanh(mu), studies, np.random.default_rng(key))
    zt = truths(grid, math.atanh(math.tanh(mu)), tau, studies, key)
    res = studies_of(runs, SETTINGS)
    words = verdicts_of(res, res, grid, a, SETTINGS, np.random.default_rng(0))
    present = np.isfinite(res["zm"])
    pi = consensus_batch(np.where(present, res["zm"], 0.0), np.where(present, res["Vm"], 1.0), present, SETTINGS.level)
    f = rung_flags(words)
    shared = 0.0 if mu == 0 else (1.0 if tau == 0 else float(stats.norm.cdf(abs(mu) / tau)))
    both_signs = (zt > 0).any(1) & (zt < 0).any(1)
    new_z = mu + tau * np.random.default_rng([*key, 1]).normal(size=studies)
    cover = (pi["pi_lo"] <= new_z) & (new_z <= pi["pi_hi"])
    sign_any = f["sign_neg"] | f["sign_pos"]
    nearly_any = f["nearly_neg"] | f["nearly_pos"]
    out = {
        "sign": share(f["sign_neg"] if mu < 0 else sign_any),
        "sign_false": share(f["sign_pos"] if mu < 0 else sign_any),
        "nearly": share(f["nearly_neg"] if mu < 0 else nearly_any),
        "nearly_false": share(f["nearly_pos"] | (f["nearly_neg"] if shared < 0.975 else False)),
        "reversal": share(f["reversal"]),
        "reversal_false": share(f["reversal"] & ~both_signs),
        "differ": share(f["differ"]),
        "differ_false": share(f["differ"]) if tau == 0 else None,
        "near": share(f["near"]),
        "near_false": share(f["near"]) if mu != 0 else None,
        "coverage": share(cover),
        "sign_shared": shared,
    }
    return out, runs


# ---- the best possible --------------------------------------------------------------------------
def least_favourable_power(
    noise: np.ndarray, mu1: float = -0.55, alpha: float = 0.05, draws: int = 2000, iters: int = 120, seed: int = 0
) -> dict:
    """The power of the most powerful test of "every model at ``mu1``" against the composite null
    of "nearly every model" (every boundary point: the models' truths N(-1.96 tau, tau^2), tau on a
    grid from 0 to 0.6), told the noise: ``noise`` holds simulated studies' model-mean errors at
    tau = 0 (their variance, common to the models, is what the test is told). The test is
    Neyman-Pearson's against a mixture of boundary points; the mixture's weights are raised where
    the test's size exceeds ``alpha`` and lowered where it is below, until the size is ``alpha``
    wherever the mixture puts weight (the least favourable mixture): its power bounds every test of
    size ``alpha`` at every boundary point. Also the bound told ``mu1`` (issue 30's: the boundary
    point with ``mu1``'s mean alone)."""
    rng = np.random.default_rng(seed)
    pool = noise[np.isfinite(noise).all(1)]
    M = pool.shape[1]
    V = float(np.var(pool))
    taus = np.linspace(0.0, 0.6, 31)

    def errors(n):
        return pool[rng.integers(0, len(pool), n)][:, rng.permutation(M)]

    def log_null(z, t):
        s2 = t * t + V
        return (-0.5 * (z + C975 * t) ** 2 / s2 - 0.5 * np.log(2 * np.pi * s2)).sum(-1)

    def log_alt(z):
        return (-0.5 * (z - mu1) ** 2 / V - 0.5 * np.log(2 * np.pi * V)).sum(-1)

    alt = mu1 + errors(draws)
    nulls = [-C975 * t + t * rng.normal(size=(draws, M)) + errors(draws) for t in taus]
    L_alt, l_alt = np.stack([log_null(alt, t) for t in taus], 1), log_alt(alt)
    L_null = [np.stack([log_null(z, t) for t in taus], 1) for z in nulls]
    l_null = [log_alt(z) for z in nulls]
    log_pi = np.full(len(taus), -np.log(len(taus)))
    for _ in range(iters):
        stat = [ln - special.logsumexp(L + log_pi, axis=1) for L, ln in zip(L_null, l_null)]
        pi = np.exp(log_pi)
        values = np.concatenate(stat)
        weights = np.concatenate([np.full(draws, p / draws) for p in pi])
        order = np.argsort(-values)
        k = values[order][min(np.searchsorted(np.cumsum(weights[order]), alpha), len(values) - 1)]
        size = np.array([np.mean(s > k) for s in stat])
        log_pi = log_pi + 2.0 * (size - alpha) / alpha
        log_pi -= special.logsumexp(log_pi)
    power = float(np.mean(l_alt - special.logsumexp(L_alt + log_pi, axis=1) > k))
    # told mu1 too: the boundary point with mean mu1 (tau = 0.55 / 1.96), the statistic sum (z - mu1)^2
    t_b = abs(mu1) / C975
    stat_alt = ((alt - mu1) ** 2).sum(-1)
    stat_b = ((mu1 + t_b * rng.normal(size=(draws, M)) + errors(draws) - mu1) ** 2).sum(-1)
    told_mu = float(np.mean(stat_alt < np.quantile(stat_b, alpha)))
    return {"least_favourable": power, "largest_size": float(size.max()), "told_mu": told_mu}


# ---- per run ------------------------------------------------------------------------------------
REML_GRID = np.linspace(0.0, 0.99, 34)


def _reml_variances(scores: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(z, posterior-mean variance, variance at the REML estimate) of each run of ``scores`` (runs,
    checkpoints, 3): each residual series' AR(1) coefficient from its restricted likelihood on a
    grid (flat prior), the variance of z at (phi_x, phi_y) ``1 / (n_eff - 3)`` with Dutilleul's
    n_eff (never above the independent units')."""
    R = linear_maker(scores[:, :, :1])
    rx = np.einsum("bij,bj->bi", R, scores[:, :, 1])
    ry = np.einsum("bij,bj->bi", R, scores[:, :, 2])
    S = ar1_corr(REML_GRID, pos)
    ev, vec = np.linalg.eigh(R @ np.swapaxes(R, -1, -2))
    m = int(np.sum(ev[0] > 1e-8 * ev[0].max()))
    K = vec[..., -m:]
    KR = np.swapaxes(K, -1, -2) @ R
    Mg = (KR[:, None] @ S[None]) @ np.swapaxes(KR, -1, -2)[:, None]
    _, logdet = np.linalg.slogdet(Mg)
    Minv = np.linalg.inv(Mg)
    C = (R[:, None] @ S[None]) @ np.swapaxes(R, -1, -2)[:, None]
    trC = np.trace(C, axis1=-2, axis2=-1)
    Cf = C.reshape(len(R), len(REML_GRID), -1)
    trCC = Cf @ np.swapaxes(Cf, -1, -2)

    def posterior(resid):
        w = np.einsum("bnm,bn->bm", K, resid)
        qf = np.einsum("bgm,bm->bg", np.einsum("bm,bgmk->bgk", w, Minv), w)
        ll = -0.5 * logdet - 0.5 * m * np.log(qf)
        p = np.exp(ll - ll.max(-1, keepdims=True))
        return p / p.sum(-1, keepdims=True)

    px, py = posterior(rx), posterior(ry)
    n_eff = 1 + trC[:, :, None] * trC[:, None, :] / trCC
    n_eff = np.minimum(n_eff, n_eff[:, :1, :1])
    s2 = 1 / np.maximum(n_eff - 3, 0.5)
    r = (rx * ry).sum(-1) / np.sqrt((rx * rx).sum(-1) * (ry * ry).sum(-1))
    mean = (px[:, :, None] * py[:, None, :] * s2).sum((-2, -1))
    mode = s2[np.arange(len(r)), px.argmax(-1), py.argmax(-1)]
    return np.arctanh(r), mean, mode


def ar2_scores(rng, runs: int, n: int, rho: float, a1: float = 0.5, a2: float = 0.3) -> np.ndarray:
    """Runs shaped like :func:`.simulate.run_scores`' but with AR(2) residual series (coefficients
    ``a1``, ``a2``; innovations correlated ``rho``, so the partial correlation is ``rho``)."""
    burn = 50
    u = rng.normal(size=(runs, n + burn, 2))
    u[..., 1] = rho * u[..., 0] + math.sqrt(1 - rho * rho) * u[..., 1]
    e = np.zeros_like(u)
    for k in range(2, n + burn):
        e[:, k] = a1 * e[:, k - 1] + a2 * e[:, k - 2] + u[:, k]
    e = e[:, burn:] / e[:, burn:].std()
    t = np.arange(n)
    zc = 0.5 + 0.3 * (1 - np.exp(-t / max(n / 4, 1))) + 0.02 * rng.normal(size=(runs, n))
    return np.stack([zc, 0.8 * zc + 0.02 * e[..., 0], -0.4 * zc + 0.02 * e[..., 1]], -1)


def per_run_rows(runs: int = 2000, chunk: int = 250) -> list[dict]:
    from oodcorr.analysis.per_run.stacked import run_statistics

    rows = []
    for n in (21, 27):
        for kind in (0.0, 0.5, 0.8, 0.95, "ar2"):
            for rho in (0.0, -0.5):
                rng = np.random.default_rng([1, n, 7])
                if kind == "ar2":
                    sc = ar2_scores(rng, runs, n, rho)
                else:
                    sc = run_scores(rng, np.full(runs, rho), n, kind, noise=0.02)
                zt = math.atanh(rho)
                shipped = run_statistics(sc)
                zs, se2 = np.arctanh(shipped["r"]), shipped["se_z"] ** 2
                parts = [_reml_variances(sc[s : s + chunk], np.arange(n)) for s in range(0, runs, chunk)]
                z, v_mean, v_mode = (np.concatenate(x) for x in zip(*parts))
                row = {"checkpoints": n, "residuals": kind if kind == "ar2" else f"AR(1) {kind}", "rho": rho}
                for name, zz, v, p in (
                    ("modified t (shipped)", zs, se2, shipped["p"]),
                    ("REML, posterior mean", z, v_mean, 2 * special.ndtr(-np.abs(z) / np.sqrt(v_mean))),
                    ("REML estimate", z, v_mode, 2 * special.ndtr(-np.abs(z) / np.sqrt(v_mode))),
                ):
                    ok = np.isfinite(zz) & np.isfinite(v)
                    row[name] = {
                        "reject": float(np.mean(p[ok] < 0.05)),
                        "coverage": float(np.mean(np.abs(zz[ok] - zt) < 1.96 * np.sqrt(v[ok]))),
                        "scaled_square": float(np.mean((zz[ok] - zt) ** 2 / v[ok])),
                        "variance_ratio": float(np.var(zz[ok] - zt) / np.mean(v[ok])),
                    }
                rows.append(row)
                print(
                    f"per run {n} {row['residuals']} rho {rho}: "
                    + ", ".join(
                        f"{k} {row[k]['reject']:.3f}/{row[k]['coverage']:.3f}/{row[k]['scaled_square']:.2f}"
                        for k in ("modified t (shipped)", "REML, posterior mean", "REML estimate")
                    ),
                    flush=True,
                )
    return rows


# ---- a table of 2,000 pairs ---------------------------------------------------------------------
# (mu, tau, share of the table's pairs): half null, the rest shared or spread values of either sign
MIX = (
    (0.0, 0.0, 0.25),
    (0.0, 0.15, 0.15),
    (0.0, 0.3, 0.10),
    (-0.2, 0.0, 0.05),
    (0.2, 0.05, 0.05),
    (-0.35, 0.1, 0.05),
    (0.55, 0.0, 0.05),
    (-0.55, 0.1, 0.05),
    (0.3, 0.3, 0.10),
    (-0.4, 0.45, 0.10),
    (0.1, 0.0, 0.05),
)


def storey(p: np.ndarray, lam: float = 0.5) -> np.ndarray:
    """Storey's q-values: Benjamini-Hochberg's adjusted p-values times the estimated share of true
    nulls, ``#{p > lam} / (m (1 - lam))`` (at most 1)."""
    ok = np.isfinite(p)
    pi0 = min(1.0, float(np.sum(p[ok] > lam)) / max(ok.sum() * (1 - lam), 1))
    return np.minimum(multitest.bh(p) * pi0, 1.0)


def sign_svalues(z, se, null_weight: float = 10.0, grid: int = 20) -> tuple[np.ndarray, np.ndarray]:
    """A candidate not shipped: (lfsr, s-value) of each estimate ``z`` (standard error ``se``), an
    empirical-Bayes local false sign rate as in Stephens 2017 (ashr), written here. The estimates
    share a prior on their true values, a point mass at 0 and zero-centred normals of sds on a
    geometric grid, its weights fitted by EM (the point mass favoured by a Dirichlet penalty of
    ``null_weight``); a pair's lfsr is its posterior chance of 0 or of the other sign, its s-value
    the mean lfsr of the pairs at least as certain."""
    z, se = np.asarray(z, float), np.asarray(se, float)
    ok = np.isfinite(z) & np.isfinite(se) & (se > 0)
    out_l, out_s = np.full(z.shape, np.nan), np.full(z.shape, np.nan)
    x, s = z[ok], se[ok]
    top = 2 * math.sqrt(max(float(np.max(x * x - s * s)), 1e-6))
    sds = np.r_[0.0, np.geomspace(max(float(s.min()) / 10, 1e-3), max(top, 2e-3), grid)]
    total = np.sqrt(sds[None, :] ** 2 + s[:, None] ** 2)
    lik = np.exp(-0.5 * (x[:, None] / total) ** 2) / total
    penalty = np.r_[null_weight, np.ones(grid)]
    pi = np.full(len(sds), 1 / len(sds))
    for _ in range(1000):
        w = pi * lik
        w /= w.sum(1, keepdims=True)
        new = (w.sum(0) + penalty - 1) / (len(x) + penalty.sum() - len(sds))
        done = float(np.max(np.abs(new - pi))) < 1e-9
        pi = new
        if done:
            break
    w = pi * lik
    w /= w.sum(1, keepdims=True)
    var = np.where(sds[None, :] > 0, 1 / (1 / np.maximum(sds[None, :] ** 2, 1e-300) + 1 / s[:, None] ** 2), 0.0)
    mean = var * x[:, None] / s[:, None] ** 2
    sd = np.sqrt(var)
    below = np.where(sd > 0, special.ndtr(-mean / np.where(sd > 0, sd, 1.0)), 0.0)
    p_below, p_zero = (w * below).sum(1), w[:, 0]
    lfsr = np.clip(np.minimum(p_below + p_zero, 1 - p_below), 0.0, 1.0)
    order = np.argsort(lfsr, kind="stable")
    sval = np.empty_like(lfsr)
    sval[order] = np.cumsum(lfsr[order]) / np.arange(1, len(lfsr) + 1)
    out_l[ok], out_s[ok] = lfsr, sval
    return out_l, out_s


# the same, with the non-null pairs' values kept away from 0 on both sides (no mode at 0)
MIX_AWAY = (
    (0.0, 0.0, 0.6),
    (-0.2, 0.0, 0.1),
    (0.2, 0.0, 0.1),
    (-0.4, 0.0, 0.1),
    (0.4, 0.0, 0.1),
)


MIX_NAMES = {"table": "the mix", "table_away": "values away from 0"}


def table_rows(pairs: int = 2000, tables: int = 10, seed: int = 37, mix=MIX) -> dict:
    """Repeated tables of ``pairs`` pairs of the Pythia shape with a known ``mix`` ((mu, tau, share)
    of the pairs), each table's statements corrected by each candidate."""
    grid, phi = Grid(16, 1, 27), 0.8
    counts = [int(round(s * pairs)) for _, _, s in mix]
    per_kind = []
    for j, ((mu, tau, _), n) in enumerate(zip(mix, counts)):
        a = Assumptions(phi=phi, model_sd=tau)
        key = [seed, j]
        runs = simulate_runs(grid, a, math.tanh(mu), n * tables, np.random.default_rng(key))
        res = studies_of(runs, SETTINGS)
        shared = 0.0 if mu == 0 else (1.0 if tau == 0 else float(stats.norm.cdf(abs(mu) / tau)))
        per_kind.append((mu, shared, res))
    out = {}
    for corr in ("holm", "bh", "storey", "lfsr", "none"):
        fdp_sign, fdp_nearly, found, n_sign = [], [], [], []
        for t in range(tables):
            cols = {k: [] for k in ("p_mean", "p_generalises", "p_heterogeneity", "p_reversal")}
            meta = []
            for (mu, shared, res), n in zip(per_kind, counts):
                sl = slice(t * n, (t + 1) * n)
                for k in cols:
                    cols[k].append(res[k][sl])
                meta.append(
                    (
                        np.full(n, mu),
                        np.full(n, shared),
                        res["z"][sl],
                        res["n_models"][sl],
                        res["near"][sl],
                        np.where(res["p_high_side"][sl] < res["p_low_side"][sl], -1.0, 1.0),
                        res["se"][sl],
                    )
                )
            how = {"storey": storey, "lfsr": multitest.bh}.get(corr, lambda p, c=corr: multitest.adjust(p, c))
            adj = {k: how(np.concatenate(v)) for k, v in cols.items()}
            mu, shared, z, M, near, gsign, se = (np.concatenate(x) for x in zip(*meta))
            if corr == "lfsr":  # the average's sign by the local false sign rate, the rest by BH
                adj["p_mean"] = sign_svalues(z, se)[1]
            words = [
                verdict(
                    {
                        "n_finite": int(M[i]),
                        "n_models_consensus": int(M[i]),
                        "p_reversal_adj": adj["p_reversal"][i],
                        "p_heterogeneity_adj": adj["p_heterogeneity"][i],
                        "p_generalises_adj": adj["p_generalises"][i],
                        "p_mean_adj": adj["p_mean"][i],
                        "r_consensus": math.tanh(z[i]),
                        "_generalises_sign": gsign[i],
                        "_near": bool(near[i]),
                    },
                    SETTINGS.alpha,
                )
                for i in range(len(mu))
            ]
            f = rung_flags(words)
            said_neg, said_pos = f["sign_neg"], f["sign_pos"]
            said = said_neg | said_pos
            wrong = (said & (mu == 0)) | (said_neg & (mu > 0)) | (said_pos & (mu < 0))
            nearly = f["nearly_neg"] | f["nearly_pos"]
            nearly_wrong = nearly & ((shared < 0.975) | (f["nearly_neg"] & (mu > 0)) | (f["nearly_pos"] & (mu < 0)))
            fdp_sign.append(wrong.sum() / max(said.sum(), 1))
            fdp_nearly.append(nearly_wrong.sum() / max(nearly.sum(), 1))
            true_sign = mu != 0
            found.append(float(np.mean((said_neg & (mu < 0) | said_pos & (mu > 0))[true_sign])))
            n_sign.append(int(said.sum()))
        out[corr] = {
            "fdr_sign": float(np.mean(fdp_sign)),
            "fdp_sign_max": float(np.max(fdp_sign)),
            "fdr_nearly": float(np.mean(fdp_nearly)),
            "found": float(np.mean(found)),
            "sign_statements": float(np.mean(n_sign)),
        }
        print(f"table of {pairs} pairs, {corr}: {out[corr]}", flush=True)
    return {"pairs": pairs, "tables": tables, "mix": [list(m) for m in mix], "corrections": out}


# ---- the tables ---------------------------------------------------------------------------------
def _cell(b: dict | None) -> str:
    return "–" if b is None else f"{b['share']:.3f} ± {b['se']:.3f}"


def markdown(out: dict) -> str:
    """The tables of benchmarks/README.md#14-the-answer-across-models-every-rung-measured."""
    rows = out["rows"]
    shapes: dict = {}
    for r in rows:
        shapes.setdefault((r["runs"], r["models"], r["checkpoints"], r["phi"]), {})[(r["mu"], r["tau"])] = r
    lines = [
        "| runs × models (checkpoints) | φ | a sign, every model −0.5 | nearly every model, every model −0.5 "
        "| best possible (least favourable; told μ) | nearly every, boundary τ 0.28 | false: nearly every "
        "| false: a sign at μ 0 | models differ falsely (τ 0) | reversal falsely | PI coverage, lowest |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for (K, M, N, phi), rs in sorted(shapes.items()):
        same = rs[(-0.55, 0.0)]
        best = same.get("best_possible") or {}
        false_nearly = max(
            (r["nearly_false"]["share"], r["nearly_false"]["se"]) for r in rs.values() if r["sign_shared"] < 0.975
        )
        false_sign = max((r["sign_false"]["share"], r["sign_false"]["se"]) for (mu, _), r in rs.items() if mu == 0)
        differ = max((r["differ_false"]["share"], r["differ_false"]["se"]) for r in rs.values() if r["differ_false"])
        rev = max((r["reversal_false"]["share"], r["reversal_false"]["se"]) for r in rs.values())
        cov = min(r["coverage"]["share"] for r in rs.values())
        lines.append(
            f"| {K} × {M} ({N}) | {phi:g} | {_cell(same['sign'])} | {_cell(same['nearly'])} | "
            f"{best.get('least_favourable', math.nan):.3f} ({best.get('told_mu', math.nan):.3f}) | "
            f"{_cell(rs[BOUNDARY]['nearly'])} | {false_nearly[0]:.3f} ± {false_nearly[1]:.3f} | "
            f"{false_sign[0]:.3f} ± {false_sign[1]:.3f} | {differ[0]:.3f} ± {differ[1]:.3f} | "
            f"{rev[0]:.3f} ± {rev[1]:.3f} | {cov:.3f} |"
        )
    if out.get("per_run"):
        names = ("modified t (shipped)", "REML, posterior mean", "REML estimate")
        lines += [
            "",
            "| checkpoints | residuals | ρ | "
            + " | ".join(f"{n}: size or power / coverage / E[(z−θ)²/se²]" for n in names)
            + " |",
            "| ---: | --- | ---: | " + " | ".join("---:" for _ in names) + " |",
        ]
        for r in out["per_run"]:
            cells = [f"{r[n]['reject']:.3f} / {r[n]['coverage']:.3f} / {r[n]['scaled_square']:.2f}" for n in names]
            lines.append(f"| {r['checkpoints']} | {r['residuals']} | {r['rho']:g} | " + " | ".join(cells) + " |")
    for key in ("table", "table_away"):
        t = out.get(key)
        if not t:
            continue
        lines += [
            "",
            f"| correction ({t['pairs']} pairs, {t['tables']} tables; {MIX_NAMES[key]}) "
            "| false discovery rate of sign statements "
            "| largest in one table | of 'nearly every model' | true signs found | sign statements per table |",
            "| --- | ---: | ---: | ---: | ---: | ---: |",
        ]
        for corr, c in t["corrections"].items():
            lines.append(
                f"| {corr} | {c['fdr_sign']:.3f} | {c['fdp_sign_max']:.3f} | {c['fdr_nearly']:.3f} | "
                f"{c['found']:.3f} | {c['sign_statements']:.0f} |"
            )
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--markdown", action="store_true", help="print the tables of the JSON at --out and stop")
    ap.add_argument("--studies", type=int, default=1000, help="studies per regime")
    ap.add_argument("--models", type=int, nargs="*", default=list(MODELS))
    ap.add_argument("--runs", type=int, nargs="*", default=list(RUNS))
    ap.add_argument("--phis", type=float, nargs="*", default=list(PHIS))
    ap.add_argument("--seed", type=int, default=37, help="a new seed: studies nobody tuned on (issue 30's: 30)")
    ap.add_argument("--no-oracle", action="store_true")
    ap.add_argument("--no-per-run", action="store_true")
    ap.add_argument("--no-table", action="store_true")
    ap.add_argument("--only-table", action="store_true", help="rerun the tables of 2,000 pairs into the JSON at --out")
    args = ap.parse_args(argv)
    if args.markdown:
        print(markdown(json.loads(args.out.read_text())), end="")
        return 0
    t0, c0 = time.time(), time.process_time()
    if args.only_table:
        out = json.loads(args.out.read_text())
        out["table"] = table_rows(seed=args.seed)
        out["table_away"] = table_rows(seed=args.seed, mix=MIX_AWAY)
        out["table"]["seconds"] = round(time.time() - t0, 1)
        args.out.write_text(json.dumps(out, indent=1) + "\n")
        print(markdown(out))
        return 0
    load = [os.getloadavg()]
    rows = []
    for K in args.runs:
        N = 27 if K == 1 else 21
        for M in args.models:
            for phi in args.phis:
                grid = Grid(M, K, N)
                for mu, tau in SPREADS:
                    res, runs = regime(grid, phi, mu, tau, args.studies, args.seed)
                    row = {"models": M, "runs": K, "checkpoints": N, "phi": phi, "mu": mu, "tau": tau}
                    row.update(studies=args.studies, **res)
                    if (mu, tau) == (-0.55, 0.0) and not args.no_oracle:
                        zm = studies_of(runs, SETTINGS)["zm"]
                        row["best_possible"] = least_favourable_power(zm - mu)
                    rows.append(row)
                    print(
                        f"[{time.time() - t0:6.0f} s] {M} x {K} x {N} phi {phi} mu {mu} tau {tau}: sign "
                        f"{res['sign']['share']:.3f} (false {res['sign_false']['share']:.3f}), nearly "
                        f"{res['nearly']['share']:.3f} (false {res['nearly_false']['share']:.3f}), coverage "
                        f"{res['coverage']['share']:.3f}"
                        + (
                            f", best possible {row['best_possible']['least_favourable']:.3f}"
                            if "best_possible" in row
                            else ""
                        ),
                        flush=True,
                    )
            load.append(os.getloadavg())
    per_run = [] if args.no_per_run else per_run_rows()
    table = None if args.no_table else table_rows(seed=args.seed)
    table_away = None if args.no_table else table_rows(seed=args.seed, mix=MIX_AWAY)
    load.append(os.getloadavg())
    out = {
        "machine": platform.platform(),
        "python": sys.version.split()[0],
        "settings": {"alpha": SETTINGS.alpha, "level": SETTINGS.level, "agreement_correction": "none (one pair)"},
        "seed": args.seed,
        "load_average": load,
        "rows": rows,
        "per_run": per_run,
        "table": table,
        "table_away": table_away,
        "seconds": round(time.time() - t0, 1),
        "cpu_seconds": round(time.process_time() - c0, 1),
    }
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(markdown(out))
    print(f"{out['seconds']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
