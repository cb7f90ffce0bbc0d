"""Simulated score series and studies with known partial correlations, for tests and benchmarks."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd

from ..across.agreement_table import agreement
from ..cell.correlate import corr, residual_pair
from ..cell.inference import assess, dependence
from ..cell.resample import cell_rng
from ..cell.residualise import GamSettings
from ..options import Options
from ..pipeline import analyse
from .items import answer_items, ar1


def ar1_series(rng: np.random.Generator, n: int, phi, rho: float, noise: float = 0.02, series: str = "ar1"):
    """One run of :func:`run_scores` with two OOD testsets, as (x, y, z)."""
    scores = run_scores(rng, [rho], n, phi, noise=noise, series=series)[0]
    return tuple(np.ascontiguousarray(scores[:, k]) for k in (1, 2, 0))


def calibrate(
    n: int,
    phi,
    rho: float,
    reps: int,
    inferences=("modified-t",),
    *,
    method: str = "pearson",
    residualiser: str = "linear",
    series: str = "ar1",
    extra: dict | None = None,
    opts: Options | None = None,
) -> dict:
    """Rejection rate and coverage of each procedure on ``reps`` simulated runs."""
    opts = opts or Options(n_boot=999, n_perm=999)
    level, seed = opts.level, opts.seed
    rng = np.random.default_rng([seed, n, int(round(1000 * np.mean(phi))), int(round(1000 * rho)) + 1000])
    px, py = (phi, phi) if np.isscalar(phi) else phi
    truth = rho * math.sqrt((1 - px * px) * (1 - py * py)) / (1 - px * py) if series == "ar1" else rho
    pos = np.arange(n)
    settings = {k: dataclasses.replace(opts, inference=k) for k in inferences}
    names = list(inferences) + list(extra or {})
    acc = {k: {"reject": 0, "cover": 0, "widths": [], "neffs": [], "low": 0, "valid": 0} for k in names}
    for i in range(reps):
        x, y, z = ar1_series(rng, n, phi, rho, series=series)
        rp = residual_pair(x, y, z, method, residualiser, GamSettings())
        deps = (dependence(rp["rx"], rp["Rx"], pos), dependence(rp["ry"], rp["Ry"], pos))
        r, results = corr(rp["rx"], rp["ry"], method), {}
        for k in inferences:
            a = assess(rp, r, method, pos, settings[k], deps, cell_rng(seed, n, i, k))
            results[k] = (a["p"], a["ci_low"], a["ci_high"], a["n_eff"])
        for k, f in (extra or {}).items():
            results[k] = (*f(rp, pos, cell_rng(seed, n, i, k)), math.nan)
        for k, (p, lo, hi, ne) in results.items():
            s = acc[k]
            if math.isfinite(p):
                s["valid"] += 1
                s["reject"] += p < 1 - level
            if not (math.isfinite(lo) and math.isfinite(hi)):
                lo, hi = -1.0, 1.0
            s["cover"] += lo <= truth <= hi
            s["widths"].append(hi - lo)
            s["neffs"].append(ne)
            s["low"] += bool(ne < 5)
    return {
        k: {
            "reject": s["reject"] / reps,
            "coverage": s["cover"] / reps,
            "width": float(np.median(s["widths"])),
            "n_eff": float(np.nanmedian(s["neffs"])) if np.isfinite(s["neffs"]).any() else math.nan,
            "low_info": s["low"] / reps,
            "valid": s["valid"] / reps,
        }
        for k, s in acc.items()
    }


# the OOD testsets' loadings on the in-domain score (the first two are ar1_series')
LOADINGS = (0.8, -0.4, 0.6, -0.2, 0.5, 0.3, -0.6, 0.4)


def run_scores(
    rng: np.random.Generator,
    rhos,
    n_checkpoints: int,
    phi,
    *,
    n_ood: int = 2,
    noise: float = 0.02,
    series: str = "ar1",
    drift: float = 0.5,
    sampling_sd=0.0,
    shape: str = "line",
) -> np.ndarray:
    """The scores (runs, checkpoints, 1 + n_ood) of ``len(rhos)`` simulated runs: column 0 in-domain, 1 + j OOD j."""
    if shape not in SHAPES:
        raise ValueError(f"unknown shape {shape!r}; known: {', '.join(SHAPES)}")
    rhos = np.asarray(rhos, dtype=float).reshape(-1)
    B, n = len(rhos), n_checkpoints
    t = np.arange(n)
    u = rng.normal(size=(B, n, n_ood))
    for rho in np.unique(rhos):  # mix each run's innovations to its own equicorrelation (a Cholesky factor)
        if rho < -1 / (n_ood - 1) + 1e-9:
            raise ValueError(f"rho {rho} is below -1/(n_ood - 1): no equicorrelated noise")
        idx = np.flatnonzero(rhos == rho)
        u[idx] = u[idx] @ np.linalg.cholesky(np.full((n_ood, n_ood), rho) + (1 - rho) * np.eye(n_ood)).T
    if series == "drift":
        e = np.cumsum(u, axis=1) * drift + rng.normal(size=(B, n, n_ood))
    elif series in ("ar1", "trend"):  # ``phi`` one coefficient, or one per OOD testset
        e = ar1(u, np.broadcast_to(np.asarray(phi, dtype=float), (n_ood,)))
        if series == "trend":
            bend = rng.normal(size=(B, n_ood))
            e = e + 1.5 * (np.sin(np.pi * t / max(n - 1, 1))[None, :, None] * bend[:, None, :])
    else:
        raise ValueError(f"unknown series {series!r}; known: ar1, drift, trend")
    z = 0.5 + 0.3 * (1 - np.exp(-t / max(n / 4, 1))) + noise * rng.normal(size=(B, n))  # in-domain, plus white noise
    a = np.array(LOADINGS[:n_ood])
    ood = (a * z[:, :, None] if shape == "line" else curved(rng, z, a)) + noise * e
    sd = np.broadcast_to(np.asarray(sampling_sd, dtype=float), (n_ood,))
    if np.any(sd > 0):
        ood = ood + sd * rng.normal(size=(B, n, n_ood))
    return np.concatenate([z[:, :, None], ood], axis=2)


SHAPES = ("line", "curve")


def curved(rng: np.random.Generator, z: np.ndarray, loadings: np.ndarray) -> np.ndarray:
    """Each run's OOD scores as logistic curves of its in-domain score ``z``, drawn per run and testset."""
    B = z.shape[0]
    lo, hi = z.min(1, keepdims=True), z.max(1, keepdims=True)
    c = lo + (hi - lo) * rng.uniform(0.15, 0.85, size=(B, len(loadings)))
    k = rng.uniform(10.0, 40.0, size=(B, len(loadings)))
    return np.sign(loadings) * 0.3 / (1 + np.exp(-k[:, None, :] * (z[:, :, None] - c[:, None, :])))


def study_table(
    rng: np.random.Generator,
    rhos,
    n_runs: int,
    n_checkpoints: int,
    phi,
    *,
    run_sd: float = 0.0,
    **draw,
) -> pd.DataFrame:
    """A simulated study in the canonical long layout: one model per entry of ``rhos`` (its partial correlation
    between every two OOD testsets), ``n_runs`` runs of ``n_checkpoints`` checkpoints (units 0, 1, ...)."""
    n_ood = draw.get("n_ood", 2)
    if not 2 <= n_ood <= len(LOADINGS):
        raise ValueError(f"n_ood must be 2 to {len(LOADINGS)}")
    t = np.arange(n_checkpoints)
    names = ["in-domain", *(f"ood{j}" for j in range(n_ood))]
    frames = []
    for m, rho_m in enumerate(rhos):
        for i in range(n_runs):
            rho = math.tanh(math.atanh(float(rho_m)) + run_sd * rng.normal()) if run_sd else float(rho_m)
            scores = run_scores(rng, [rho], n_checkpoints, phi, **draw)[0]
            frames.append(
                pd.DataFrame(
                    {
                        "model": f"m{m}",
                        "in_domain": "in-domain",
                        "run": f"m{m}-run{i}",
                        "unit": np.repeat(t, n_ood + 1),
                        "testset": np.tile(names, n_checkpoints),
                        "score": scores.ravel(),
                    }
                )
            )
    return pd.concat(frames, ignore_index=True)


def scenario(name: str, n_models: int, effect: float = 0.5) -> list[float]:
    """The models' partial correlations of a named scenario: null, same, half, spread, spread-off-zero."""
    if name == "null":
        return [0.0] * n_models
    if name == "same":
        return [effect] * n_models
    if name == "half":
        k = n_models // 2
        return [abs(effect)] * k + [-abs(effect)] * (n_models - k)
    if name == "spread":
        return list(np.tanh(np.linspace(-abs(effect), abs(effect), n_models)))
    if name == "spread-off-zero":
        return list(np.tanh(np.linspace(-abs(effect) - 0.3, abs(effect) - 0.3, n_models)))
    raise ValueError(f"unknown scenario {name!r}; known: null, same, half, spread, spread-off-zero")


def verdict_rates(
    rhos,
    n_runs: int,
    n_checkpoints: int,
    phi: float,
    reps: int,
    *,
    seed: int = 0,
    opts=None,
    keep=None,
    **study,
) -> dict:
    """The verdicts the analysis gives on ``reps`` simulated studies, for the pair (ood0, ood1)."""
    opts = opts or Options(pool_by=())
    counts: dict[str, int] = {}
    cover = finite = 0
    kept = []
    mu = float(np.mean(np.arctanh(np.asarray(rhos, dtype=float))))
    for i in range(reps):
        table = study_table(np.random.default_rng([seed, i]), rhos, n_runs, n_checkpoints, phi, **study)
        pc = analyse(table, opts)
        agree = agreement(pc, opts.alpha, opts.agreement_correction, opts.level, opts.near_zero)
        row = agree[(agree["x"] == "ood0") & (agree["y"] == "ood1")].iloc[0]
        counts[row["verdict"]] = counts.get(row["verdict"], 0) + 1
        if math.isfinite(row["ci_low_consensus"]):
            finite += 1
            cover += row["ci_low_consensus"] <= math.tanh(mu) <= row["ci_high_consensus"]
        if keep is not None:
            kept.append(keep(table, row, pc))
    out = {
        "verdicts": {k: counts[k] / reps for k in sorted(counts)},
        "coverage": cover / finite if finite else math.nan,
        "reps": reps,
    }
    if keep is not None:
        out["kept"] = kept
    return out


CURVE_SHAPES = ("late", "plateau", "s-shape", "line")  # curve_study's
FAMILIES = {"curves": ("late", "plateau", "s-shape"), "mixed": CURVE_SHAPES, "lines": ("line",)}
IN_DOMAIN = "in-domain"


@dataclasses.dataclass(frozen=True)
class Items:
    """Item noise: items per testset, the share of an item's variance that is difficulty, and its persistence."""

    n_in_domain: int = 200
    n_ood: int = 300
    difficulty: float = 0.5
    persistence: float = 0.8


@dataclasses.dataclass(frozen=True)
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
    raise ValueError(f"unknown curve shape {shape!r}; choose from {', '.join(CURVE_SHAPES)}")


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
            # the curve's two parameters: (midpoint, slope) of a logistic, (rate, 0) of a saturating one
            params = (0.0, 0.0)
            if shapes[m, k] == "late":
                params = rng.uniform(0.55, 0.8), rng.uniform(8.0, 16.0)
            elif shapes[m, k] == "s-shape":
                params = rng.uniform(0.3, 0.7), rng.uniform(5.0, 10.0)
            elif shapes[m, k] == "plateau":
                params = rng.uniform(3.0, 8.0), 0.0
            f = ood_curve(a[runs], shapes[m, k], params)
            curves[runs, :, k] = base[m, k] + amp[m, k] * f
    truth = np.repeat(np.eye(K)[None], M, axis=0)
    truth[:, 0, 1] = truth[:, 1, 0] = rhos
    # unit-variance AR(1) series whose innovations correlate as each run's model's truth
    u = np.einsum("bij,btj->bti", np.linalg.cholesky(truth[model_of]), rng.normal(size=(B, T, K)))
    e = ar1(u, phi)
    population = np.concatenate([z[:, :, None], curves + noise_sd * e], axis=-1)
    names = [IN_DOMAIN] + [f"ood{k}" for k in range(K)]
    scores, examples = population, None
    if items is not None:  # each testset answered item by item: the scores and the per-item table
        scores = np.empty_like(population)
        frames = []
        for j, name in enumerate(names):
            n = items.n_in_domain if j == 0 else items.n_ood
            mat = answer_items(rng, np.clip(population[:, :, j], 0.02, 0.98), n, items.difficulty, items.persistence)
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
        examples = pd.concat(frames, ignore_index=True)
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
