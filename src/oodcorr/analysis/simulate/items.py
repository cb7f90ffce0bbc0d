"""Simulated studies whose scores are means over finite testsets: item noise with a known truth."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import special, stats

from ..items.item_noise import half_means, item_covariance
from ..per_run.stacked import measured_statistics, run_statistics

ITEM_LIMIT = 1000  # above this many items a testset is simulated by its sufficient statistics
RESIDUAL_SD = 0.02  # s: the tasks' residual series' sd
_NODES, _WEIGHTS = np.polynomial.legendre.leggauss(16)  # the sine substitution leaves a smooth integrand


def population(rng: np.random.Generator, rhos, n_checkpoints: int, phi: float = 0.8, s: float = RESIDUAL_SD):
    """The tasks' population accuracies of ``len(rhos)`` runs: (runs, checkpoints, 3), columns the
    in-domain task, x and y; run i's x and y correlate ``rhos[i]`` given the in-domain ability."""
    rhos = np.asarray(rhos, dtype=float).reshape(-1)
    B, T = len(rhos), n_checkpoints
    t = np.arange(T)
    a_z = 0.55 + 0.3 * (1 - np.exp(-t / max(T / 4, 1)))[None, :] + 0.01 * rng.normal(size=(B, T))
    u = rng.normal(size=(B, T, 2))
    u[:, :, 1] = rhos[:, None] * u[:, :, 0] + np.sqrt(1 - rhos[:, None] ** 2) * u[:, :, 1]
    e = ar1(u, phi)
    a_x = 0.6 + 0.6 * (a_z - 0.75) + s * e[:, :, 0]
    a_y = 0.55 + 0.5 * (a_z - 0.75) + s * e[:, :, 1]
    return np.clip(np.stack([a_z, a_x, a_y], -1), 0.02, 0.98)


def ar1(u: np.ndarray, phi) -> np.ndarray:
    """Stationary unit-variance AR(1) series along axis 1 driven by ``u`` (``phi``: one, or one per last column)."""
    e = np.empty_like(u)
    e[:, 0] = u[:, 0]
    step = np.sqrt(1 - phi * phi)
    for k in range(1, u.shape[1]):
        e[:, k] = phi * e[:, k - 1] + step * u[:, k]
    return e


def disagreement(accuracy: float, neighbours: float) -> float:
    """The share of items two checkpoints of accuracy ``accuracy`` answer differently when their
    ``w`` correlate ``neighbours`` (``difficulty + (1 - difficulty) persistence`` for neighbours)."""
    q = float(stats.norm.ppf(accuracy))
    both = _bivariate_cdf(np.array(q), np.array(q), np.array(neighbours))
    return float(2 * (accuracy - both))


def _bivariate_cdf(a, b, r):
    """``P(U < a, V < b)`` for standard normals correlated ``r`` (arrays of one shape): Plackett's
    integral of the bivariate density over the correlation from 0, with ``rho = sin(theta)`` so the
    integrand stays smooth up to ``r = 1`` (Gauss-Legendre)."""
    a, b, r = np.broadcast_arrays(*(np.asarray(v, dtype=float) for v in (a, b, r)))
    top = np.arcsin(np.clip(r, -1.0, 1.0))
    out = np.zeros_like(a)
    for x, w in zip(_NODES, _WEIGHTS):
        th = 0.5 * top * (x + 1)
        s, c2 = np.sin(th), np.maximum(np.cos(th) ** 2, 1e-300)
        out += w * np.exp(-(a * a - 2 * s * a * b + b * b) / (2 * c2))
    return special.ndtr(a) * special.ndtr(b) + 0.5 * top * out / (2 * np.pi)


def item_noise_covariance(acc: np.ndarray, n: int, difficulty: float, persistence: float) -> np.ndarray:
    """The covariance across checkpoints of the accuracy of ``n`` random items, for population
    accuracies ``acc`` (..., T): ``(P(w_t < q_t, w_s < q_s) - A_t A_s) / n``."""
    acc = np.asarray(acc, dtype=float)
    T = acc.shape[-1]
    q = special.ndtri(acc)
    if np.ndim(difficulty) or np.ndim(persistence):  # arrays of them, broadcast against (T, T)
        lag = np.abs(np.arange(T)[:, None] - np.arange(T)[None, :])
        corr = difficulty + (1 - difficulty) * np.asarray(persistence, dtype=float) ** lag
        both = _bivariate_cdf(q[..., :, None], q[..., None, :], corr)
        return (both - acc[..., :, None] * acc[..., None, :]) / n
    i, j = np.triu_indices(T)  # one pair of the same model: the upper triangle, mirrored
    corr = difficulty + (1 - difficulty) * persistence ** (j - i).astype(float)
    both = _bivariate_cdf(q[..., i], q[..., j], corr)
    out = np.empty((*acc.shape[:-1], T, T))
    out[..., i, j] = (both - acc[..., i] * acc[..., j]) / n
    out[..., j, i] = out[..., i, j]
    return out


def answer_items(rng, acc: np.ndarray, n: int, difficulty: float, persistence: float) -> np.ndarray:
    """Item correctness (runs, checkpoints, n) at accuracies ``acc``; the items' difficulties are shared by the runs."""
    B, T = acc.shape
    b = rng.normal(size=(1, 1, n))
    v = np.ascontiguousarray(ar1(rng.normal(size=(T, B, n)).transpose(1, 0, 2), persistence))  # drawn by checkpoint
    w = math.sqrt(difficulty) * b + math.sqrt(1 - difficulty) * v
    return (w < special.ndtri(acc)[:, :, None]).astype(np.float32)


def item_runs(
    rng: np.random.Generator,
    rhos,
    n_checkpoints: int,
    sizes: tuple[int, int, int],
    *,
    phi: float = 0.8,
    difficulty: float = 0.5,
    persistence: float = 0.8,
    splits: int = 8,
    s: float = RESIDUAL_SD,
) -> dict:
    """One run per entry of ``rhos``, its testsets of ``sizes`` items (in-domain, x, y)."""
    truth = population(rng, rhos, n_checkpoints, phi, s)
    B, T, _ = truth.shape
    scores = np.empty_like(truth)
    sigma = np.empty((B, 3, T, T))
    halves = np.empty((B, splits, 2, T, 3))
    for k, n in enumerate(sizes):
        if n <= ITEM_LIMIT:
            mat = answer_items(rng, truth[:, :, k], n, difficulty, persistence).astype(float)
            scores[:, :, k] = mat.mean(-1)
            sigma[:, k] = item_covariance(mat)
            halves[..., k] = np.stack([half_means(m, splits, rng)[0] for m in mat])
            continue
        cov = item_noise_covariance(truth[:, :, k], n, difficulty, persistence)
        sigma[:, k] = cov
        L = np.linalg.cholesky(cov + 1e-14 * np.eye(T))
        a = n // 2
        parts = [
            truth[:, :, k] + math.sqrt(n / m) * np.einsum("btu,bu->bt", L, rng.normal(size=(B, T))) for m in (a, n - a)
        ]
        scores[:, :, k] = (a * parts[0] + (n - a) * parts[1]) / n
        halves[..., k] = np.stack(parts, 1)[:, None]
    return {"truth": truth, "scores": scores, "halves": halves, "sigma": sigma}


def item_table(
    rng: np.random.Generator,
    rhos,
    n_runs: int,
    n_checkpoints: int,
    sizes: tuple[int, int, int],
    *,
    phi: float = 0.8,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """One study as the analysis reads it: the canonical long table and the per-item table, one model per ``rhos``
    (the items' difficulty 0.5, persistence 0.8)."""
    names = ["in-domain", "ood0", "ood1"]
    model_rhos = np.repeat(np.asarray(rhos, dtype=float), n_runs)
    truth = population(rng, model_rhos, n_checkpoints, phi)
    mats = [answer_items(rng, truth[:, :, k], n, 0.5, 0.8) for k, n in enumerate(sizes)]
    longs, items = [], []
    T = n_checkpoints
    for b in range(len(model_rhos)):
        model, run = f"m{b // n_runs}", f"m{b // n_runs}-run{b % n_runs}"
        for k, name in enumerate(names):
            m = mats[k][b]
            longs.append(
                pd.DataFrame(
                    {"model": model, "in_domain": names[0], "run": run, "unit": np.arange(T), "testset": name}
                ).assign(score=m.mean(-1), n=m.shape[1])
            )
            items.append(
                pd.DataFrame(
                    {
                        "model": model,
                        "run": run,
                        "unit": np.repeat(np.arange(T), m.shape[1]),
                        "testset": name,
                        "example": np.tile(np.arange(m.shape[1]), T),
                        "correct": m.ravel().astype(float),
                    }
                )
            )
    return pd.concat(longs, ignore_index=True), pd.concat(items, ignore_index=True)


def fast_run_rows(d: dict, models: int, runs: int, level: float = 0.95, chunk: int = 2000) -> pd.DataFrame:
    """The run rows of :func:`.pipeline.analyse` (Pearson, linear, ood0-ood1) for many studies at once, items known."""
    B, T, _ = d["scores"].shape
    obs = run_statistics(d["scores"], level)
    cols = measured_statistics(d["scores"], d["halves"], level, chunk)
    study = np.arange(B) // (models * runs)
    model = (np.arange(B) // runs) % models
    frame = pd.DataFrame(
        {
            "model": [f"m{m}" for m in model],
            "in_domain": [f"s{i}" for i in study],
            "run": [f"m{m}-run{k}" for m, k in zip(model, np.arange(B) % runs)],
            "pool_group": "all runs",
            "x": "ood0",
            "y": "ood1",
            "method": "pearson",
            "residualiser": "linear",
            **{k: obs[k] for k in ("r", "p", "ci_low", "ci_high", "se_z", "n_eff", "phi_x", "phi_y")},
            "n": T,
            "n_units": T,
            "note": "",
            "p_method": "modified t-test (AR(1) effective n)",
            "eiv_from": "items",
            "noise": "every testset: item noise estimated from per-item correctness",
        }
    )
    for c, v in cols.items():
        frame[c] = v
    for c in ("reliability_in_domain_low", "reliability_in_domain_high"):
        frame[c] = frame["reliability_in_domain"]
    frame["n_runs"], frame["n_runs_finite"] = 1, np.isfinite(frame["r"]).astype(int)
    return frame
