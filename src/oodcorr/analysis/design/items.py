"""The item noise of a design's simulated studies, and the answer the analysis gives through it."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..across.consensus import across_models
from ..across.measured_answer import attenuation_of
from ..cell.correlate import POOLING_CAP, fisher_z
from ..items.measurement import NOISE_LIMITED
from ..per_run.stacked import measured_statistics, run_statistics
from ..simulate.items import item_noise_covariance

MIN_ITEMS = 4  # the analysis cross-fits a testset of 4 items or more (two halves of 2)
# random halvings per simulated run (the analysis averages SPLITS):
# benchmarks/README.md#11-planning-a-study-oodcorr-design
DESIGN_SPLITS = 2
# the per-study keys the verdict reads (:func:`.power.verdicts_of`), taken from the cross-fitted
# ladder where a study's runs are cross-fitted
LADDER_KEYS = ("n_models", "z", "p_reversal", "p_heterogeneity", "p_generalises", "p_mean", "p_high_side", "p_low_side")


@dataclass(frozen=True)
class ItemNoise:
    """The item noise of a simulated study (``in_domain``, ``ood``: items per testset, None for none)."""

    in_domain: int | None = None
    ood: int | None = None
    persistence: float = 0.8
    difficulty: float = 0.5
    accuracy: float = 0.5
    residual_sd: float = 0.02

    def __post_init__(self):
        for name in ("in_domain", "ood"):
            n = getattr(self, name)
            if n is not None and not (float(n) == int(n) and int(n) >= MIN_ITEMS):
                raise ValueError(f"items of the {name.replace('_', '-')} set: {MIN_ITEMS} or more, got {n}")
        if not 0 <= self.persistence < 1:
            raise ValueError(f"the item noise's persistence must lie in [0, 1), got {self.persistence}")
        if not 0 <= self.difficulty < 1:
            raise ValueError(f"the items' difficulty share must lie in [0, 1), got {self.difficulty}")
        if not 0 < self.accuracy < 1:
            raise ValueError(f"the OOD sets' accuracy must lie strictly between 0 and 1, got {self.accuracy}")
        if not self.residual_sd > 0:
            raise ValueError(f"the residual series' sd must be positive, got {self.residual_sd}")

    @property
    def none(self) -> bool:
        """No testset has item noise (every one infinitely large)."""
        return self.in_domain is None and self.ood is None


def noisy_runs(truth: np.ndarray, items: ItemNoise, unit: float, rng, splits: int = DESIGN_SPLITS) -> dict:
    """The tasks' scores ``truth`` (runs, checkpoints, 3) with the item noise of ``items`` (docs/design.md):
    ``scores`` as the testsets show them, and ``halves`` (runs, splits, 2, checkpoints, 3) per random halving."""
    truth = np.asarray(truth, dtype=float)
    B, T, _ = truth.shape
    scores = truth.copy()
    halves = np.broadcast_to(truth[:, None, None], (B, splits, 2, T, 3)).copy()
    whole_eps = rng.normal(size=(3, B, T))
    diff_eps = rng.normal(size=(3, B, splits, T))
    curve = np.clip(truth[:, :, 0].mean(0), 0.02, 0.98)
    for k, n in enumerate((items.in_domain, items.ood, items.ood)):
        if n is None:
            continue
        acc = curve if k == 0 else np.full(T, items.accuracy)
        cov = item_noise_covariance(acc, int(n), items.difficulty, items.persistence) * unit * unit
        # Cholesky factors of the whole set's noise and of the difference of its halves (n // 2 and the rest)
        n, a = int(n), int(n) // 2
        eps = 1e-14 * max(float(np.trace(cov)) / T, 1e-300) * np.eye(T)
        whole = np.linalg.cholesky(cov + eps)
        diff = np.linalg.cholesky(n * (1 / a + 1 / (n - a)) * cov + eps)
        wa, wb = (n - a) / n, a / n
        w = whole_eps[k] @ whole.T  # (B, T)
        d = diff_eps[k] @ diff.T  # (B, splits, T)
        scores[:, :, k] += w
        halves[:, :, 0, :, k] += w[:, None] + wa * d
        halves[:, :, 1, :, k] += w[:, None] - wb * d
    return {"scores": scores, "halves": halves}


def measure_runs(d: dict, level: float = 0.95, residualiser: str = "linear", gam=None, bases=None) -> dict:
    """Every run of :func:`noisy_runs` measured as the workflow measures it."""
    obs = run_statistics(d["scores"], level, residualiser=residualiser, gam=gam, bases=bases)
    return {**obs, **measured_statistics(d["scores"], d["halves"], level)}


def _all_finite_mean(v: np.ndarray) -> np.ndarray:
    """The mean over the last axis where every value is finite, else NaN."""
    return np.where(np.isfinite(v).all(-1), v.mean(-1), np.nan)


def _pooled_moments(runs: dict, level: float) -> tuple[dict, np.ndarray]:
    """(:func:`.measured_answer.attenuation` of every study at once, and whether each has a testset mostly item
    noise) from the runs' arrays (studies, models, runs)."""
    models = {}
    for side in ("x", "y"):
        # each model's runs' sums, NaN unless every run's is finite (:func:`.measurement.pool_measured`)
        for c in ("task_var", "obs_var", "eiv_var"):
            v = runs[f"{c}_{side}"]
            models[f"{c}_{side}"] = np.where(np.isfinite(v).all(-1), v.sum(-1), np.nan)
        models[f"reliability_{side}_low"] = _all_finite_mean(runs[f"reliability_{side}_low"])
    rel_z = _all_finite_mean(runs["reliability_in_domain"])
    models["reliability_in_domain"] = models["reliability_in_domain_low"] = rel_z  # low = estimate, as measured
    out = attenuation_of(models, np.ones(rel_z.shape, bool), level)
    limited = np.zeros(runs["r"].shape[0], bool)
    for side in ("x", "y", "in_domain"):
        est, low = out[f"reliability_{side}"], out[f"reliability_{side}_low"]
        fin = np.isfinite(est)
        limited |= (fin & (est < NOISE_LIMITED)) | (~fin & np.isfinite(low) & (low < NOISE_LIMITED))
    return out, limited


def measured_studies(runs: dict, level: float, near_zero: float, sign: np.ndarray, intervals: bool = False) -> dict:
    """The across-model answer of every simulated study whose runs are measurements, as the agreement table's
    (``sign``: each model's, +1 or -1, multiplying its runs' correlations)."""
    r, r_eiv = runs["r"], runs["r_eiv"]
    rel, limited = _pooled_moments(runs, level)
    band = near_zero * rel["band"]

    def usable(rr, se):
        return np.isfinite(rr) & np.isfinite(se) & (se > 0)

    def ladder(rr, se, p, sel):
        ok = usable(rr, se)[sel]
        z = fisher_z(rr[sel], POOLING_CAP) * sign[None, :, None]
        return across_models(z, np.where(ok, se[sel] ** 2, 1.0), ok, p[sel], level, band[sel], intervals=intervals)

    fin = np.isfinite(r)
    items = ((fin & np.isfinite(r_eiv)) == fin).all((-1, -2)) & fin.any((-1, -2))
    every = np.ones(len(r), bool)
    res = ladder(r_eiv, runs["se_z_eiv"], runs["p_eiv"], every)
    if not items.all():  # the observed ladder where some run has no cross-fitted value (agreement's "unknown")
        obs = ladder(r, runs["se_z"], runs["p"], ~items)
        for k in (*LADDER_KEYS, "near"):
            res[k] = res[k].copy()
            res[k][~items] = obs[k]
    res["n_finite"] = fin.any(-1).sum(-1)
    res["band"] = rel["band"]
    observed_models = usable(r, runs["se_z"]).any(-1).sum(-1)
    lost = items & (res["n_models"] < 2) & (observed_models >= 2)
    res["limited"] = limited | lost
    res["items"] = items
    return res
