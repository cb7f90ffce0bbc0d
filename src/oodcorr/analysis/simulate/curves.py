"""Simulated checkpoint series whose OOD scores follow the in-domain ability along curves."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .items import answer_items, ar1

SHAPES = ("late", "plateau", "s-shape", "line")
FAMILIES = {"curves": ("late", "plateau", "s-shape"), "mixed": SHAPES, "lines": ("line",)}
IN_DOMAIN = "in-domain"


@dataclass(frozen=True)
class Items:
    """Item noise: items per testset, the share of an item's variance that is difficulty, and its persistence."""

    n_in_domain: int = 200
    n_ood: int = 300
    difficulty: float = 0.5
    persistence: float = 0.8


@dataclass(frozen=True)
class CurveStudy:
    """One simulated study."""

    long: pd.DataFrame
    examples: pd.DataFrame | None
    truth: np.ndarray
    ability: np.ndarray
    population: np.ndarray
    curves: np.ndarray
    noise: np.ndarray
    shapes: np.ndarray


def _logistic(x):
    return 1.0 / (1.0 + np.exp(-x))


def ability(rng: np.random.Generator, n_runs: int, n_checkpoints: int) -> np.ndarray:
    """Each run's in-domain ability (runs, T) at checkpoints 1..T: saturating or logistic, increasing, in [0, 1]."""
    u = np.arange(1, n_checkpoints + 1, dtype=float)[None, :] / n_checkpoints
    B = n_runs
    sat = rng.random(B) < 0.5
    k = rng.uniform(1.5, 6.0, B)[:, None]
    mid, slope = rng.uniform(0.15, 0.45, B)[:, None], rng.uniform(6.0, 14.0, B)[:, None]
    curve = np.where(sat[:, None], 1 - np.exp(-k * u), _logistic(slope * (u - mid)))
    start = np.where(sat, 0.0, _logistic(-slope[:, 0] * mid[:, 0]))[:, None]
    end = np.where(sat, 1 - np.exp(-k[:, 0]), _logistic(slope[:, 0] * (1 - mid[:, 0])))[:, None]
    a0, a1 = rng.uniform(0.0, 0.15, B)[:, None], rng.uniform(0.85, 1.0, B)[:, None]
    return a0 + (a1 - a0) * (curve - start) / (end - start)


def _shape_params(rng: np.random.Generator, shape: str) -> tuple[float, float]:
    """The curve's two parameters: (midpoint, slope) of a logistic, (rate, 0) of a saturating one."""
    if shape == "late":
        return rng.uniform(0.55, 0.8), rng.uniform(8.0, 16.0)
    if shape == "s-shape":
        return rng.uniform(0.3, 0.7), rng.uniform(5.0, 10.0)
    if shape == "plateau":
        return rng.uniform(3.0, 8.0), 0.0
    return 0.0, 0.0


def ood_curve(a: np.ndarray, shape: str, params: tuple[float, float]) -> np.ndarray:
    """``f(a)``: an increasing function of the ability with ``f(0) = 0`` and ``f(1) = 1``."""
    a = np.asarray(a, dtype=float)
    if shape == "line":
        return a
    if shape == "plateau":
        k = params[0]
        return (1 - np.exp(-k * a)) / (1 - math.exp(-k))
    if shape in ("late", "s-shape"):
        mid, slope = params
        lo, hi = _logistic(-slope * mid), _logistic(slope * (1 - mid))
        return (_logistic(slope * (a - mid)) - lo) / (hi - lo)
    raise ValueError(f"unknown curve shape {shape!r}; choose from {', '.join(SHAPES)}")


def curve_study(
    rng: np.random.Generator,
    rhos,
    n_runs: int,
    n_checkpoints: int,
    *,
    n_ood: int = 4,
    phi: float = 0.5,
    family: str = "curves",
    noise_sd: float = 0.02,
    items: Items | None = None,
) -> CurveStudy:
    """One model per entry of ``rhos`` (ood0-ood1's partial correlation), curves from ``FAMILIES[family]``."""
    rhos = np.asarray(rhos, dtype=float).reshape(-1)
    if family not in FAMILIES:
        raise ValueError(f"unknown curve family {family!r}; choose from {', '.join(FAMILIES)}")
    if n_ood < 2 or not 0 <= phi < 1 or np.any(np.abs(rhos) >= 1) or n_checkpoints < 2:
        raise ValueError("need n_ood >= 2, 0 <= phi < 1, |rho| < 1 and at least 2 checkpoints")
    M, T, K = len(rhos), n_checkpoints, n_ood
    B = M * n_runs
    model_of = np.repeat(np.arange(M), n_runs)
    a = ability(rng, B, T)
    gamma = rng.uniform(0.6, 1.6, M)[model_of, None]
    z = rng.uniform(0.35, 0.5, M)[model_of, None] + rng.uniform(0.3, 0.45, M)[model_of, None] * a**gamma
    shapes = rng.choice(FAMILIES[family], size=(M, K))
    base, amp = rng.uniform(0.3, 0.55, (M, K)), rng.uniform(0.1, 0.3, (M, K))
    curves = np.empty((B, T, K))
    for m in range(M):
        runs = model_of == m
        for k in range(K):
            f = ood_curve(a[runs], shapes[m, k], _shape_params(rng, shapes[m, k]))
            curves[runs, :, k] = base[m, k] + amp[m, k] * f
    truth = np.repeat(np.eye(K)[None], M, axis=0)
    truth[:, 0, 1] = truth[:, 1, 0] = rhos
    # unit-variance AR(1) series whose innovations correlate as each run's model's truth
    u = np.einsum("bij,btj->bti", np.linalg.cholesky(truth[model_of]), rng.normal(size=(B, T, K)))
    e = ar1(u, phi)
    population = np.concatenate([z[:, :, None], curves + noise_sd * e], axis=-1)
    names = [IN_DOMAIN] + [f"ood{k}" for k in range(K)]
    scores, examples = population, None
    if items is not None:
        scores, examples = _item_scores(rng, population, items, names, n_runs)
    unit = np.arange(1, T + 1)
    run_names = [f"m{b // n_runs}-run{b % n_runs}" for b in range(B)]
    long = pd.DataFrame(
        {
            "model": np.repeat([f"m{m}" for m in model_of], T * (K + 1)),
            "in_domain": IN_DOMAIN,
            "run": np.repeat(run_names, T * (K + 1)),
            "unit": np.tile(np.repeat(unit, K + 1), B),
            "testset": np.tile(names, B * T),
            "score": scores.reshape(-1),
        }
    )
    return CurveStudy(long, examples, truth, a, population, curves, e, shapes)


def _item_scores(rng, population: np.ndarray, items: Items, names: list[str], n_runs: int):
    """Each testset answered item by item: the scores (runs, T, testsets) and the per-item table."""
    B, T, J = population.shape
    acc = np.clip(population, 0.02, 0.98)
    scores = np.empty_like(acc)
    frames = []
    for j, name in enumerate(names):
        n = items.n_in_domain if j == 0 else items.n_ood
        mat = answer_items(rng, acc[:, :, j], n, items.difficulty, items.persistence)
        scores[:, :, j] = mat.mean(-1)
        frames.append(
            pd.DataFrame(
                {
                    "model": np.repeat([f"m{b // n_runs}" for b in range(B)], T * n),
                    "run": np.repeat([f"m{b // n_runs}-run{b % n_runs}" for b in range(B)], T * n),
                    "unit": np.tile(np.repeat(np.arange(1, T + 1), n), B),
                    "testset": name,
                    "example": np.tile(np.arange(n), B * T),
                    "correct": mat.reshape(-1).astype(float),
                }
            )
        )
    return scores, pd.concat(frames, ignore_index=True)
