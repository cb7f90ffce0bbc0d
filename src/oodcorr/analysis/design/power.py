"""Planning a study before paying for it: how often each verdict is found, by simulation (item noise included)."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import asdict, dataclass, fields

import numpy as np

from ...core.answer import (
    NEAR_ZERO,
    NEARLY_EVERY,
    NEGATIVE,
    NOISE_LIMITABLE,
    NOISE_LIMITED_VERDICT,
    ON_AVERAGE,
    POSITIVE,
    SIGN_REVERSAL,
    SIGNS,
)
from ...core.defaults import ANALYSIS as DEFAULTS
from ..across import multitest
from ..across.consensus import across_models, verdict
from ..across.measured_answer import attenuation_of
from ..cell.correlate import POOLING_CAP, SIMULATED_CAP, fisher_z
from ..cell.residualise import KINDS, GamSettings, Spec, parse
from ..items.measurement import NOISE_LIMITED
from ..per_run.stacked import measured_statistics, run_statistics
from ..simulate.items import item_noise_covariance
from ..simulate.runs import SHAPES, run_scores

NOISE = 0.02  # the simulator's residual scale (simulate.run_scores' ``noise``): item noise is brought to it
VERDICT_POWERS = ("cell", "cell_corrected", "average sign", "generalises", "sign reversal")
POWER_LABELS = {
    "cell": "per-run cell (its interval excludes 0)",
    "cell_corrected": "per-run cell, significant after the correction across the table's pairs",
    "average sign": "the sign on average (every model has the effect; the answer states its sign)",
    "generalises": "the sign in nearly every model (every model has the effect)",
    "sign reversal": "sign reversal (half the models +effect, half -effect)",
}
DEFAULT_EFFECTS = (0.0, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)


MIN_ITEMS = 4  # the analysis cross-fits a testset of 4 items or more (two halves of 2)
# random halvings per simulated run (the analysis averages SPLITS):
# benchmarks/README.md#11-planning-a-study-oodcorr-design
DESIGN_SPLITS = 2
# the per-study keys verdicts_of reads, from the cross-fitted ladder where a study's runs are cross-fitted
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
    return np.where(np.isfinite(v).all(-1), v.mean(-1), np.nan)


def _ladder(r, se, p, sign: np.ndarray, level: float, band, intervals: bool) -> dict:
    """:func:`across_models` of studies' runs ``r`` (studies, models, runs), each model's sign turned by ``sign``."""
    ok = np.isfinite(r) & np.isfinite(se) & (se > 0)
    z = fisher_z(r, POOLING_CAP) * sign[None, :, None]
    return across_models(z, np.where(ok, se**2, 1.0), ok, p, level, band, intervals=intervals)


def _measured_studies(runs: dict, level: float, near_zero: float, sign: np.ndarray, intervals: bool = False) -> dict:
    """The across-model answer of every simulated study whose runs are measurements, as the agreement table's
    (``sign``: each model's, +1 or -1, multiplying its runs' correlations)."""
    # :func:`.measured_answer.attenuation` of every study at once, and whether each has a testset mostly item noise
    models = {}
    for side in ("x", "y"):
        # each model's runs' sums, NaN unless every run's is finite (:func:`.measurement.pool_measured`)
        for c in ("task_var", "obs_var", "eiv_var"):
            v = runs[f"{c}_{side}"]
            models[f"{c}_{side}"] = np.where(np.isfinite(v).all(-1), v.sum(-1), np.nan)
        models[f"reliability_{side}_low"] = _all_finite_mean(runs[f"reliability_{side}_low"])
    rel_z = _all_finite_mean(runs["reliability_in_domain"])
    models["reliability_in_domain"] = models["reliability_in_domain_low"] = rel_z  # low = estimate, as measured
    rel = attenuation_of(models, np.ones(rel_z.shape, bool), level)
    limited = np.zeros(runs["r"].shape[0], bool)
    for side in ("x", "y", "in_domain"):
        est, low = rel[f"reliability_{side}"], rel[f"reliability_{side}_low"]
        fin = np.isfinite(est)
        limited |= (fin & (est < NOISE_LIMITED)) | (~fin & np.isfinite(low) & (low < NOISE_LIMITED))
    r, se = runs["r"], runs["se_z"]
    band = near_zero * rel["band"]
    fin = np.isfinite(r)
    items = ((fin & np.isfinite(runs["r_eiv"])) == fin).all((-1, -2)) & fin.any((-1, -2))
    res = _ladder(runs["r_eiv"], runs["se_z_eiv"], runs["p_eiv"], sign, level, band, intervals)
    if not items.all():  # the observed ladder where some run has no cross-fitted value (agreement's "unknown")
        sel = ~items
        obs = _ladder(r[sel], se[sel], runs["p"][sel], sign, level, band[sel], intervals)
        for k in (*LADDER_KEYS, "near"):
            res[k] = res[k].copy()
            res[k][~items] = obs[k]
    res["n_finite"] = fin.any(-1).sum(-1)
    res["band"] = rel["band"]
    observed_models = (fin & np.isfinite(se) & (se > 0)).any(-1).sum(-1)
    lost = items & (res["n_models"] < 2) & (observed_models >= 2)
    res["limited"] = limited | lost
    res["items"] = items
    return res


@dataclass(frozen=True)
class Grid:
    """The shape of one table of the analysis: ``models`` models, each with ``runs`` runs (the seeds
    of one pool group) of ``checkpoints`` checkpoints, and ``pairs`` OOD pairs corrected together."""

    models: int
    runs: int
    checkpoints: int
    pairs: int = 1

    def __post_init__(self):
        for name in ("models", "runs", "checkpoints", "pairs"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"the grid needs at least 1 of {name}, got {getattr(self, name)}")
        if self.checkpoints < 4:
            raise ValueError(f"a run needs at least 4 checkpoints for the linear residualiser, got {self.checkpoints}")


@dataclass(frozen=True)
class Assumptions:
    """A simulated study's assumptions: phi, model and run spreads, series kind, non-null pairs, item noise, shape."""

    phi: float = 0.8
    model_sd: float = 0.0
    run_sd: float = 0.0
    series: str = "ar1"
    non_null_pairs: int = 1
    items: ItemNoise = ItemNoise()
    shape: str = "curve"

    def __post_init__(self):
        if not 0 <= self.phi < 1:
            raise ValueError(f"phi must lie in [0, 1), got {self.phi}")
        for name in ("model_sd", "run_sd"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"{name} must be 0 or more, got {getattr(self, name)}")
        if self.non_null_pairs < 1:
            raise ValueError(f"non_null_pairs must be at least 1, got {self.non_null_pairs}")
        if self.shape not in SHAPES:
            raise ValueError(f"unknown shape {self.shape!r}; known: {', '.join(SHAPES)}")


@dataclass(frozen=True)
class Settings:
    """The analysis settings the verdicts depend on (:class:`.options.Options`' of the same names)."""

    alpha: float = DEFAULTS["alpha"]
    level: float = DEFAULTS["level"]
    correction: str = DEFAULTS["correction"]  # the per-run cells' (the heatmaps' stars)
    near_zero: float = DEFAULTS["near_zero"]
    agreement_correction: str = DEFAULTS["agreement_correction"]  # the answer's statements
    residualiser: str = DEFAULTS["residualisers"][0]  # the answer's (the first configured)
    gam: GamSettings = GamSettings()  # the spline's basis size and minimum points

    def __post_init__(self):
        parse(self.residualiser)  # an unknown name is an error naming it

    @property
    def simulated(self) -> str:
        """The residualiser the simulated runs are analysed with: the configured one, a GAM's by the spline."""
        spec = parse(self.residualiser)
        return Spec(KINDS[spec.kind].simulated_by, spec.step).name

    @classmethod
    def from_options(cls, opts) -> Settings:
        same = {f.name: getattr(opts, f.name) for f in fields(cls) if f.name != "residualiser"}
        return cls(**same, residualiser=opts.residualisers[0])


# ---- step 1: runs ------------------------------------------------------------------------------
def simulate_runs(
    grid: Grid,
    a: Assumptions,
    effect,
    studies: int,
    rng: np.random.Generator,
    settings: Settings = Settings(),
    bases: dict | None = None,
) -> dict:
    """``studies`` simulated studies of ``grid`` at ``effect``, analysed per run; arrays (studies, models, runs)."""
    S, M, K = studies, grid.models, grid.runs
    effect = np.broadcast_to(np.asarray(effect, dtype=float), (M,))
    if not np.all(np.abs(effect) < 1):
        raise ValueError(f"an effect is a partial correlation strictly between -1 and 1, got {effect.tolist()}")
    zt = np.arctanh(effect)[None, :] + a.model_sd * rng.normal(size=(S, M))
    zr = zt[..., None] + a.run_sd * rng.normal(size=(S, M, K))
    rhos = np.clip(np.tanh(zr), -SIMULATED_CAP, SIMULATED_CAP).ravel()
    scores = run_scores(rng, rhos, grid.checkpoints, a.phi, noise=NOISE, series=a.series, shape=a.shape)
    res = settings.simulated
    if a.items.none:
        st = run_statistics(scores, settings.level, residualiser=res, gam=settings.gam, bases=bases)
    else:
        d = noisy_runs(scores, a.items, NOISE / a.items.residual_sd, rng)
        st = measure_runs(d, settings.level, residualiser=res, gam=settings.gam, bases=bases)
    return {k: v.reshape(S, M, K) for k, v in st.items()}


# ---- step 2: studies ---------------------------------------------------------------------------
def studies_of(runs: dict, settings: Settings, flip_half: bool = False, intervals: bool = False) -> dict:
    """The across-model procedure on every simulated study; ``flip_half`` turns the later half of the models' signs."""
    r = runs["r"]
    sign = np.ones(r.shape[1])
    if flip_half:
        sign[r.shape[1] // 2 :] = -1.0
    if "r_eiv" in runs:
        return _measured_studies(runs, settings.level, settings.near_zero, sign, intervals)
    res = _ladder(r, runs["se_z"], runs["p"], sign, settings.level, settings.near_zero, intervals)
    res["n_finite"] = np.isfinite(r).any(-1).sum(-1)
    return res


def _adjusted(own: dict, nulls: dict, keys, grid: Grid, a: Assumptions, correction: str, rng) -> dict:
    """Each of ``keys``' p-values in ``own``, adjusted by ``correction`` in its simulated family (docs/design.md)."""
    n = len(own[keys[0]])
    k = min(a.non_null_pairs, grid.pairs)
    idx = rng.integers(0, len(nulls[keys[0]]), size=(n, grid.pairs - k)) if grid.pairs > k else None
    out = {}
    for key in keys:
        p = own[key]
        cols = [p] + [np.roll(p, j) for j in range(1, k)]
        fam = np.column_stack(cols)
        if idx is not None:
            fam = np.concatenate([fam, nulls[key][idx]], axis=1)
        out[key] = multitest.adjust(fam, correction)[:, 0]
    return out


P_KEYS = ("p_reversal", "p_heterogeneity", "p_generalises", "p_mean")


def verdicts_of(res: dict, null: dict, grid: Grid, a: Assumptions, settings: Settings, rng) -> list[str]:
    """The verdict of each simulated study's pair, its p-values corrected in its simulated family; ``noise-limited``
    where the measured answer finds the pair unresolved and a testset mostly item noise."""
    own, nulls = {k: res[k] for k in P_KEYS}, {k: null[k] for k in P_KEYS}
    adj = _adjusted(own, nulls, P_KEYS, grid, a, settings.agreement_correction, rng)
    limited = res.get("limited", np.zeros(len(res["n_models"]), bool))
    out = []
    for i in range(len(res["n_models"])):
        row = {
            "n_finite": int(res["n_finite"][i]),
            "n_models_consensus": int(res["n_models"][i]),
            **{f"{k}_adj": adj[k][i] for k in P_KEYS},
            "r_consensus": math.tanh(res["z"][i]) if np.isfinite(res["z"][i]) else math.nan,
            "_generalises_sign": -1.0 if res["p_high_side"][i] < res["p_low_side"][i] else 1.0,
            "_near": bool(res["near"][i]),
        }
        word = verdict(row, settings.alpha)
        if limited[i] and word in NOISE_LIMITABLE:
            word = NOISE_LIMITED_VERDICT
        out.append(word)
    return out


def verdict_shares(words: list[str]) -> dict:
    counts = Counter(words)
    return {k: counts[k] / len(words) for k in sorted(counts)}


def se_of(p: float, n: int) -> float:
    """The Monte Carlo standard error of a share ``p`` of ``n`` independent simulated studies."""
    return math.sqrt(max(p * (1 - p), 0.0) / n) if n else math.nan


@dataclass
class Curve:
    """Power against effect for one grid and set of assumptions, with Monte Carlo standard errors and verdict shares."""

    grid: Grid
    assumptions: Assumptions
    settings: Settings
    effects: list[float]
    studies: int
    power: dict
    se: dict
    verdicts: dict
    wrong_sign: list[float]
    near_zero: list[float]

    def smallest_effect(self, kind: str, target: float = 0.8) -> float | None:
        return smallest_effect(self.effects, self.power[kind], target)

    def to_json(self) -> dict:
        return {
            "grid": asdict(self.grid),
            "assumptions": asdict(self.assumptions),
            "settings": asdict(self.settings),
            "effects": self.effects,
            "studies": self.studies,
            "power": self.power,
            "se": self.se,
            "smallest_effect_80": {k: self.smallest_effect(k) for k in VERDICT_POWERS},
            "wrong_sign_generalises": self.wrong_sign,
            "near_zero": self.near_zero,
            "near_zero_se": [se_of(p, self.studies) for p in self.near_zero],
            "verdicts": self.verdicts,
        }


def smallest_effect(effects, power, target: float = 0.8) -> float | None:
    """The first crossing of ``target`` by ``power`` along ``effects`` (ascending), interpolated."""
    for i, (e, p) in enumerate(zip(effects, power)):
        if p >= target:
            if i == 0:
                return float(e)
            e0, p0 = effects[i - 1], power[i - 1]
            return float(e0 + (target - p0) * (e - e0) / (p - p0)) if p > p0 else float(e)
    return None


def _share_saying(shares: dict, words: str) -> float:
    return sum(v for k, v in shares.items() if words in k)


@dataclass(frozen=True)
class Draws:
    """What a power curve simulates: ``studies`` studies at each of ``effects``, seeded by ``seed``, in ``workers``."""

    effects: tuple = DEFAULT_EFFECTS
    studies: int = 400
    seed: int = 0
    workers: int = 1


def curve(grid: Grid, a: Assumptions, settings: Settings = Settings(), draws: Draws = Draws()) -> Curve:
    """Power against effect (:class:`Curve`) for ``grid`` under ``a``, the same seeded draws at every effect."""
    effects, studies, seed = [float(e) for e in draws.effects], draws.studies, draws.seed
    if any(not 0 <= e < 1 for e in effects):
        raise ValueError(f"effects are partial correlations in [0, 1), got {effects}")
    key = [seed, grid.models, grid.runs, grid.checkpoints, round(1e6 * a.phi), round(1e6 * a.model_sd)]
    # the 0 keeps the draws of a design without item noise as they were
    key += [round(1e6 * a.run_sd), 0, ("ar1", "drift", "trend").index(a.series)]
    bases: dict = {}  # the spline's, per chunk of runs: the in-domain scores are the same at every effect
    null_runs = simulate_runs(grid, a, 0.0, studies, np.random.default_rng(key), settings, bases)
    null = studies_of(null_runs, settings)
    null_p_runs = null_runs["p"].ravel()
    power = {k: [] for k in VERDICT_POWERS}
    se = {k: [] for k in VERDICT_POWERS}
    verdicts = {"same": [], "half": []}
    wrong, near = [], []
    n_runs = studies * grid.models * grid.runs
    for e in effects:
        runs = null_runs if e == 0 else simulate_runs(grid, a, e, studies, np.random.default_rng(key), settings, bases)
        fam_rng = np.random.default_rng([*key, 1])  # the null partners: the same at every effect
        p_run = runs["p"].ravel()
        cell = float(np.mean(np.nan_to_num(p_run, nan=1.0) < 1 - settings.level))
        adj = _adjusted({"p": p_run}, {"p": null_p_runs}, ("p",), grid, a, settings.correction, fam_rng)["p"]
        cell_c = float(np.mean(np.nan_to_num(adj, nan=1.0) < settings.alpha))
        same = verdicts_of(studies_of(runs, settings), null, grid, a, settings, fam_rng)
        half = verdicts_of(studies_of(runs, settings, flip_half=True), null, grid, a, settings, fam_rng)
        sv, hv = verdict_shares(same), verdict_shares(half)
        # the share of studies that finds each statement, from the same and half scenarios' verdict shares
        nearly = {s: _share_saying(sv, f"{s} {NEARLY_EVERY}") for s in SIGNS}
        stated = {s: nearly[s] + _share_saying(sv, f"{s} {ON_AVERAGE}") for s in SIGNS}
        found = {
            "generalises": nearly[POSITIVE] if e > 0 else sum(nearly.values()),
            "average sign": stated[POSITIVE] if e > 0 else sum(stated.values()),
            "sign reversal": _share_saying(hv, SIGN_REVERSAL),
            "wrong_sign": stated[NEGATIVE] if e > 0 else 0.0,
            "near zero": _share_saying(sv, NEAR_ZERO),
            "cell": cell,
            "cell_corrected": cell_c,
        }
        for kind in VERDICT_POWERS:  # the cells' shares are of runs, the statements' of studies
            power[kind].append(found[kind])
            se[kind].append(se_of(found[kind], n_runs if kind.startswith("cell") else studies))
        verdicts["same"].append(sv)
        verdicts["half"].append(hv)
        wrong.append(found["wrong_sign"])
        near.append(found["near zero"])
    return Curve(grid, a, settings, effects, studies, power, se, verdicts, wrong, near)


def curves(tasks, workers: int = 1) -> list[Curve]:
    """:func:`curve` of each ``(grid, assumptions, settings, draws)`` task, in ``workers`` processes
    (each curve is seeded by its own task, so the numbers do not depend on how many)."""
    tasks = list(tasks)
    if workers <= 1 or len(tasks) <= 1:
        return [curve(*t) for t in tasks]
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    cost = [t[0].models * t[0].runs * t[0].checkpoints ** 2 for t in tasks]
    order = sorted(range(len(tasks)), key=lambda i: -cost[i])  # the longest first
    with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("fork")) as ex:
        done = dict(zip(order, ex.map(curve, *zip(*(tasks[i] for i in order)))))
    return [done[i] for i in range(len(tasks))]
