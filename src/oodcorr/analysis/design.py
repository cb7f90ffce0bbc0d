"""Planning a study before paying for it: how often each verdict is found, by simulation.

``oodcorr design`` asks, for a grid of models x runs x checkpoints, how often the analysis would
find a given partial correlation: the **power** of a per-run cell, of ``generalises`` and of
``sign reversal`` (:mod:`.consensus`), over a range of effects and of dependence between
checkpoints, and the smallest effect each finds in 80 % of studies. It simulates studies with
the shared simulator (:func:`.simulate.run_scores`, the one the calibration benchmarks use) and
analyses them with the analysis' own procedures, in two steps that give what
:func:`.simulate.verdict_rates` gives (the full pipeline) at a small part of its cost:

1. **runs**: every run of every simulated study, analysed by the per-run procedure
   (:func:`run_statistics`: the linear residualiser's residual maker, the design-corrected AR(1)
   coefficients, Dutilleul's effective sample size and the modified t-test of
   :mod:`.inference`) on stacks of runs at once, giving each run's r, ``se_z`` and p;
2. **studies**: the runs of a study go to the across-model procedure
   (:func:`.consensus.across_models`, which :func:`.consensus.agreement` also calls), its
   p-values are corrected across the pairs of a table (:func:`.multitest.adjust`) and the
   verdict is :func:`.consensus.verdict`'s.

What a simulated study assumes (each a field of :class:`Assumptions`, replaced by a pilot's
estimates when one is given): every model's true partial correlation is the effect (or the
effect plus a between-model spread ``model_sd`` on the Fisher z scale; runs spread by
``run_sd`` around their model); each OOD score is its loading on the in-domain learning curve
plus an AR(1) residual series with coefficient ``phi`` and, optionally, its testset's sampling
noise (white, ``sampling`` times the residual series' sd). The effect is the correlation of the
residual series without that noise: with it, the correlation the analysis sees is smaller
(:func:`.simulate.observed_rho`), which is what more examples per testset buy back.

**The family of a table.** The paper's tables correct each verdict across a table's pairs (Holm
by default). A simulated pair of interest is corrected in a family of ``pairs`` p-values: its
own, those of ``non_null_pairs - 1`` further pairs with the same effect (other simulated studies
of the same cell) and those of null pairs (simulated studies with no effect, drawn at random),
so with the default one non-null pair its power is close to that of a test at alpha / pairs.
Pairs of a table share testsets; here they are independent, which is the assumption.

**Precision.** Every power is a share of ``studies`` simulated studies (per-run cells: of their
runs), each with its Monte Carlo standard error ``sqrt(p (1 - p) / studies)``; a fixed seed
makes every number reproducible, and the same random draws are used at every effect (common
random numbers), so a power curve is smooth and rises with the effect. The residualiser
simulated is the linear one and the method Pearson's: a GAM fit costs 0.25 s per series, and
its power is measured beside the linear one's in benchmarks/README.md#4-analysis-calibration-of-intervals-and-p-values.
How the predictions compare with the full pipeline on the calibration's scenarios:
benchmarks/README.md#11-planning-a-study-oodcorr-design.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace

import numpy as np

from . import multitest
from .consensus import across_models, verdict
from .correlate import corr_batch
from .inference import corrected_phis, effective_ns, expected_lag1, modified_tests, residual_covariances
from .pooling import fisher_z
from .residualise import linear_maker, one_blas_thread
from .simulate import run_scores

NOISE = 0.02  # the simulator's residual scale (simulate.run_scores' ``noise``): sampling noise is relative to it
VERDICT_POWERS = ("cell", "cell_corrected", "generalises", "sign reversal")
POWER_LABELS = {
    "cell": "per-run cell (its interval excludes 0)",
    "cell_corrected": "per-run cell, significant after the correction across the table's pairs",
    "generalises": "generalises (every model shares the effect)",
    "sign reversal": "sign reversal (half the models +effect, half -effect)",
}
DEFAULT_EFFECTS = (0.0, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)


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
    """What a simulated study assumes (see the module doc): the residuals' AR(1) coefficient
    ``phi``; the between-model and between-run sd of the true partial correlation on the Fisher z
    scale; a testset's sampling noise as a multiple of the residual series' sd (0: none); the
    residual series' kind (``ar1``, ``drift``, ``trend``: :func:`.simulate.run_scores`); and how
    many pairs of a table carry the effect."""

    phi: float = 0.8
    model_sd: float = 0.0
    run_sd: float = 0.0
    sampling: float = 0.0
    series: str = "ar1"
    non_null_pairs: int = 1

    def __post_init__(self):
        if not 0 <= self.phi < 1:
            raise ValueError(f"phi must lie in [0, 1), got {self.phi}")
        for name in ("model_sd", "run_sd", "sampling"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"{name} must be 0 or more, got {getattr(self, name)}")
        if self.non_null_pairs < 1:
            raise ValueError(f"non_null_pairs must be at least 1, got {self.non_null_pairs}")


@dataclass(frozen=True)
class Settings:
    """The analysis settings the verdicts depend on (:class:`.pipeline.Options`' of the same names)."""

    alpha: float = 0.05
    level: float = 0.95
    correction: str = "holm"
    near_zero: float = 0.3

    @classmethod
    def from_options(cls, opts) -> Settings:
        return cls(opts.alpha, opts.level, opts.correction, opts.near_zero)


# ---- step 1: runs ------------------------------------------------------------------------------
def _python_min(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Python's ``min(a, b)`` elementwise (``a`` unless ``b < a``), as :func:`.inference.effective_n` takes it."""
    return np.where(b < a, b, a)


def run_statistics(scores: np.ndarray, level: float = 0.95, chunk: int = 512) -> dict:
    """The per-run procedure of the analysis (:func:`.pipeline.analyse`'s per-run rows, method
    ``pearson``, residualiser ``linear``, ordered complete units) on a stack of runs: ``scores``
    (runs, checkpoints, 3) with the in-domain score, x and y. Returns arrays ``r``, ``p``,
    ``ci_low``, ``ci_high``, ``se_z``, ``n_eff``, ``phi_x``, ``phi_y``, one value per run."""
    with one_blas_thread():
        return _run_statistics(np.asarray(scores, dtype=float), level, chunk)


def _run_statistics(scores: np.ndarray, level: float, chunk: int) -> dict:
    B, n, _ = scores.shape
    pos = np.arange(n)
    out = {k: np.empty(B) for k in ("r", "n_eff", "phi_x", "phi_y")}
    for s in range(0, B, chunk):
        sc = scores[s : s + chunk]
        R = linear_maker(sc[:, :, :1])
        rx = np.einsum("bij,bj->bi", R, sc[:, :, 1])
        ry = np.einsum("bij,bj->bi", R, sc[:, :, 2])
        psi = expected_lag1(R, pos)  # x and y share their residual maker (OLS on the same in-domain score)
        _, px = corrected_phis(rx, R, pos, psi)
        _, py = corrected_phis(ry, R, pos, psi)
        C0 = R @ np.swapaxes(R, -1, -2)
        Cx, Cy = residual_covariances(R, px, pos), residual_covariances(R, py, pos)
        both = effective_ns(Cx, Cy, Cx, Cy)  # the Dutilleul n of the AR(1) covariances ...
        iid = effective_ns(C0, C0, C0, C0)  # ... never above the independent-units one
        out["n_eff"][s : s + chunk] = _python_min(both, iid)
        out["r"][s : s + chunk] = corr_batch(rx, ry, "pearson")
        out["phi_x"][s : s + chunk], out["phi_y"][s : s + chunk] = px, py
    p, lo, hi, se = modified_tests("pearson", out["r"], out["n_eff"], level)
    out.update(p=p, ci_low=lo, ci_high=hi, se_z=se)
    return out


def simulate_runs(grid: Grid, a: Assumptions, effect, studies: int, rng: np.random.Generator) -> dict:
    """The runs of ``studies`` simulated studies of ``grid`` in which every model's partial
    correlation is ``effect`` (one number, or one per model; plus the assumed spreads), analysed
    (:func:`run_statistics`); each array of shape (studies, models, runs). The draws do not
    depend on ``effect``: the same ``rng`` state gives the same innovations at every effect."""
    S, M, K = studies, grid.models, grid.runs
    effect = np.broadcast_to(np.asarray(effect, dtype=float), (M,))
    if not np.all(np.abs(effect) < 1):
        raise ValueError(f"an effect is a partial correlation strictly between -1 and 1, got {effect.tolist()}")
    zt = np.arctanh(effect)[None, :] + a.model_sd * rng.normal(size=(S, M))
    zr = zt[..., None] + a.run_sd * rng.normal(size=(S, M, K))
    rhos = np.clip(np.tanh(zr), -0.999, 0.999).ravel()
    scores = run_scores(
        rng, rhos, grid.checkpoints, a.phi, noise=NOISE, series=a.series, sampling_sd=a.sampling * NOISE
    )
    st = run_statistics(scores)
    return {k: v.reshape(S, M, K) for k, v in st.items()}


# ---- step 2: studies ---------------------------------------------------------------------------
def studies_of(runs: dict, settings: Settings, flip_half: bool = False) -> dict:
    """The across-model procedure on every simulated study (:func:`.consensus.across_models`); with
    ``flip_half`` the models from the middle on have their correlations' signs turned (the
    ``half`` scenario of :func:`.simulate.scenario`: exact in distribution for the linear
    residualiser, whose residuals turn sign with the score)."""
    r, se, p = runs["r"], runs["se_z"], runs["p"]
    M = r.shape[1]
    sign = np.ones(M)
    if flip_half:
        sign[M // 2 :] = -1.0
    z = fisher_z(r) * sign[None, :, None]
    ok = np.isfinite(r) & np.isfinite(se) & (se > 0)
    res = across_models(z, np.where(ok, se * se, 1.0), ok, p, settings.level, settings.near_zero)
    res["n_finite"] = np.isfinite(r).any(-1).sum(-1)
    return res


def _adjusted(own: dict, nulls: dict, keys, grid: Grid, a: Assumptions, settings: Settings, rng) -> dict:
    """Each of ``keys``' p-values of the items in ``own``, adjusted in its simulated family (see the
    module doc). ``own`` and ``nulls``: {key: 1-D array of p-values}."""
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
        out[key] = multitest.adjust(fam, settings.correction)[:, 0]
    return out


P_KEYS = ("p_reversal", "p_heterogeneity", "p_generalises")


def verdicts_of(res: dict, null: dict, grid: Grid, a: Assumptions, settings: Settings, rng) -> list[str]:
    """The verdict of each simulated study's pair (:func:`.consensus.verdict`), its p-values
    corrected in its simulated family."""
    adj = _adjusted({k: res[k] for k in P_KEYS}, {k: null[k] for k in P_KEYS}, P_KEYS, grid, a, settings, rng)
    out = []
    for i in range(len(res["n_models"])):
        row = {
            "n_finite": int(res["n_finite"][i]),
            "n_models_consensus": int(res["n_models"][i]),
            "p_reversal_adj": adj["p_reversal"][i],
            "p_heterogeneity_adj": adj["p_heterogeneity"][i],
            "p_generalises_adj": adj["p_generalises"][i],
            "r_consensus": math.tanh(res["z"][i]) if np.isfinite(res["z"][i]) else math.nan,
            "_near": bool(res["near"][i]),
        }
        out.append(verdict(row, settings.alpha))
    return out


def verdict_shares(words: list[str]) -> dict:
    """{verdict: share of ``words``}, sorted by verdict."""
    n = len(words)
    counts: dict[str, int] = {}
    for w in words:
        counts[w] = counts.get(w, 0) + 1
    return {k: counts[k] / n for k in sorted(counts)}


def se_of(p: float, n: int) -> float:
    """The Monte Carlo standard error of a share ``p`` of ``n`` independent simulated studies."""
    return math.sqrt(max(p * (1 - p), 0.0) / n) if n else math.nan


@dataclass
class Curve:
    """Power against effect for one grid and one set of assumptions: ``power[kind][i]`` at
    ``effects[i]`` for each kind of :data:`VERDICT_POWERS`, with its Monte Carlo standard error in
    ``se``; ``verdicts`` holds every verdict's share in both scenarios (``same``, ``half``) at
    each effect; ``studies`` simulated studies per effect."""

    grid: Grid
    assumptions: Assumptions
    settings: Settings
    effects: list[float]
    studies: int
    power: dict
    se: dict
    verdicts: dict
    wrong_sign: list[float]

    def smallest_effect(self, kind: str, target: float = 0.8) -> float | None:
        """The smallest effect at which ``kind``'s power reaches ``target``, interpolated linearly
        between the simulated effects; None when no simulated effect reaches it."""
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


def curve(
    grid: Grid,
    a: Assumptions,
    settings: Settings = Settings(),
    effects=DEFAULT_EFFECTS,
    studies: int = 400,
    seed: int = 0,
) -> Curve:
    """Power against effect (:class:`Curve`) for ``grid`` under ``a``: ``studies`` simulated studies
    per effect, the same draws at every effect (seeded by ``seed``, the grid and the assumptions,
    so a rerun gives the same numbers)."""
    effects = [float(e) for e in effects]
    if any(not 0 <= e < 1 for e in effects):
        raise ValueError(f"effects are partial correlations in [0, 1), got {effects}")
    key = [seed, grid.models, grid.runs, grid.checkpoints, round(1e6 * a.phi), round(1e6 * a.model_sd)]
    key += [round(1e6 * a.run_sd), round(1e6 * a.sampling), ("ar1", "drift", "trend").index(a.series)]
    null_runs = simulate_runs(grid, a, 0.0, studies, np.random.default_rng(key))
    null = studies_of(null_runs, settings)
    null_p_runs = null_runs["p"].ravel()
    power = {k: [] for k in VERDICT_POWERS}
    se = {k: [] for k in VERDICT_POWERS}
    verdicts = {"same": [], "half": []}
    wrong = []
    n_runs = studies * grid.models * grid.runs
    for e in effects:
        runs = null_runs if e == 0 else simulate_runs(grid, a, e, studies, np.random.default_rng(key))
        fam_rng = np.random.default_rng([*key, 1])  # the null partners: the same at every effect
        p_run = runs["p"].ravel()
        cell = float(np.mean(np.nan_to_num(p_run, nan=1.0) < 1 - settings.level))
        adj = _adjusted({"p": p_run}, {"p": null_p_runs}, ("p",), grid, a, settings, fam_rng)["p"]
        cell_c = float(np.mean(np.nan_to_num(adj, nan=1.0) < settings.alpha))
        same = verdicts_of(studies_of(runs, settings), null, grid, a, settings, fam_rng)
        half = verdicts_of(studies_of(runs, settings, flip_half=True), null, grid, a, settings, fam_rng)
        sv, hv = verdict_shares(same), verdict_shares(half)
        gen = (
            sv.get("generalises (positive)", 0.0)
            if e > 0
            else sv.get("generalises (positive)", 0.0) + sv.get("generalises (negative)", 0.0)
        )
        for kind, val, n in (
            ("cell", cell, n_runs),
            ("cell_corrected", cell_c, n_runs),
            ("generalises", gen, studies),
            ("sign reversal", hv.get("sign reversal", 0.0), studies),
        ):
            power[kind].append(val)
            se[kind].append(se_of(val, n))
        verdicts["same"].append(sv)
        verdicts["half"].append(hv)
        wrong.append(sv.get("generalises (negative)", 0.0) if e > 0 else 0.0)
    return Curve(grid, a, settings, effects, studies, power, se, verdicts, wrong)


def scenario_rates(
    grid: Grid, a: Assumptions, rhos, studies: int, seed: int = 0, settings: Settings = Settings()
) -> dict:
    """The share of each verdict over ``studies`` simulated studies whose models have the partial
    correlations ``rhos`` (one per model, e.g. :func:`.simulate.scenario`'s), by the two steps of
    the module doc: what :func:`.simulate.verdict_rates` measures with the full pipeline (the
    design's agreement check, benchmarks/design_agreement.py). The table's other pairs, if
    ``grid.pairs`` > 1, are null studies of the same grid."""
    rhos = [float(r) for r in rhos]
    if len(rhos) != grid.models:
        raise ValueError(f"{len(rhos)} correlations for {grid.models} models")
    runs = simulate_runs(grid, a, rhos, studies, np.random.default_rng([seed, 1]))
    res = studies_of(runs, settings)
    null = (
        studies_of(simulate_runs(grid, a, 0.0, studies, np.random.default_rng([seed, 2])), settings)
        if grid.pairs > 1
        else res
    )
    return verdict_shares(verdicts_of(res, null, grid, a, settings, np.random.default_rng([seed, 3])))


# ---- a pilot: the assumptions from what was run -----------------------------------------------
def _iqr(values) -> list[float]:
    v = np.asarray([x for x in values if np.isfinite(x)], dtype=float)
    return [float(np.percentile(v, 25)), float(np.percentile(v, 75))] if len(v) else [math.nan, math.nan]


def observed_phi_curve(checkpoints: int, sampling: float, phis=None, runs: int = 400, seed: int = 0):
    """(true phi, median corrected estimate of the residuals' AR(1) coefficient) of simulated runs
    with ``checkpoints`` checkpoints and sampling noise ``sampling`` (:class:`Assumptions`): the
    estimate in short runs is biased towards 0 (0.72 for a true 0.8 at 21 checkpoints), which a
    pilot's estimate is read against."""
    phis = np.round(np.arange(0.0, 0.96, 0.05), 2) if phis is None else np.asarray(phis, dtype=float)
    med = []
    for phi in phis:
        rng = np.random.default_rng([seed, checkpoints, int(round(1000 * phi)), int(round(1e6 * sampling))])
        st = run_statistics(
            run_scores(rng, np.zeros(runs), checkpoints, float(phi), noise=NOISE, sampling_sd=sampling * NOISE)
        )
        med.append(float(np.median(np.concatenate([st["phi_x"], st["phi_y"]]))))
    return phis, np.maximum.accumulate(np.asarray(med))


def _true_phi(observed: float, curve_phis, curve_med) -> float:
    """The true phi whose simulated median estimate is ``observed`` (interpolated; the ends clamp)."""
    if not np.isfinite(observed):
        return math.nan
    if observed <= curve_med[0]:
        return float(curve_phis[0])
    if observed >= curve_med[-1]:
        return float(curve_phis[-1])
    # the curve can be flat where estimates pile at 0 or at the cap: take the middle of a flat stretch
    lo = float(np.interp(observed, curve_med, curve_phis))
    hi = float(-np.interp(-observed, -curve_med[::-1], -curve_phis[::-1]))
    return 0.5 * (lo + hi)


def pilot_estimates(
    long,
    run_info=None,
    pool_by=(),
    sizes: dict | None = None,
    settings: Settings = Settings(),
    seed: int = 0,
    n_boot: int = 200,
) -> dict:
    """What a pilot (a canonical long table, :data:`.pipeline.CANON`) says about the assumptions,
    with how uncertain each is:

    * ``phi``: the residual series' AR(1) coefficient. Each run's residual series (an OOD score
      after the linear residualiser) gets the analysis' corrected estimate (``phi_x``/``phi_y`` of
      its rows); their median is read against the median that simulated runs of the pilot's
      length give at each true coefficient (:func:`observed_phi_curve`: the estimate is biased
      towards 0), and a bootstrap over the pilot's runs (``n_boot`` resamples) gives its 95 %
      interval. The interquartile range of the series' estimates and the share at the cap are
      reported beside it;
    * ``sampling``: with ``sizes`` (examples per OOD testset), each testset's binomial sampling
      sd ``sqrt(p (1 - p) / n)`` at its mean score, against its residual sd (the sd of its
      residuals on the in-domain score, median over runs): the sampling noise as a multiple of
      the rest of the residual (the :class:`Assumptions` field), per testset and its median;
    * ``model_sd`` and ``run_sd``: the square roots of the median between-model variance
      (``tau2_models`` of the agreement table, over the pairs with 2 models or more) and of the
      median between-run variance (``tau2_runs``), with the interquartile ranges over pairs.
    """
    from .consensus import agreement  # the pipeline: pilots only
    from .pipeline import Options, analyse

    opts = Options(
        methods=("pearson",),
        residualisers=("linear",),
        pool_by=tuple(pool_by),
        step0_check=False,
        example_boot=0,
        alpha=settings.alpha,
        level=settings.level,
        correction=settings.correction,
        near_zero=settings.near_zero,
    )
    pc = analyse(long, opts, run_info=run_info)
    runs = pc[pc["run"] != "pooled"]
    keys = ["model", "in_domain", "run"]
    series = (
        np.concatenate([runs[keys + ["x", "phi_x"]].to_numpy(), runs[keys + ["y", "phi_y"]].to_numpy()])
        if len(runs)
        else np.empty((0, 5))
    )
    import pandas as pd  # the analysis' tables: pilots only

    ser = pd.DataFrame(series, columns=keys + ["testset", "phi"]).drop_duplicates(keys + ["testset"])
    ser["phi"] = pd.to_numeric(ser["phi"], errors="coerce")
    ser = ser[np.isfinite(ser["phi"].to_numpy(float))]
    if ser.empty:
        raise ValueError(
            "the pilot has no run whose OOD scores got an AR(1) estimate: it needs numeric units "
            "(checkpoints, ordered) and at least two OOD testsets with scores at 4 checkpoints or more"
        )
    checkpoints = int(np.median(runs["n"].to_numpy(float)[np.isfinite(runs["r"].to_numpy(float))]))
    phi_obs = float(ser["phi"].median())
    run_ids = ser[keys].astype(str).agg("/".join, axis=1).to_numpy()
    uniq = np.unique(run_ids)
    by_run = {u: ser["phi"].to_numpy(float)[run_ids == u] for u in uniq}
    rng = np.random.default_rng([seed, 26])
    boots = [
        float(np.median(np.concatenate([by_run[u] for u in rng.choice(uniq, size=len(uniq))]))) for _ in range(n_boot)
    ]
    obs_lo, obs_hi = (float(np.percentile(boots, q)) for q in (2.5, 97.5))

    # residual and sampling sd per testset
    notes = []
    resid_sd: dict[str, list[float]] = {}
    mean_score: dict[str, list[float]] = {}
    for (_, _, _), g in long.groupby(keys, sort=True):
        dom = g["in_domain"].iloc[0]
        wide = g.pivot_table(index="unit", columns="testset", values="score", aggfunc="first")
        if dom not in wide.columns:
            continue
        z = wide[dom].to_numpy(float)
        for ts in wide.columns:
            if ts == dom:
                continue
            y = wide[ts].to_numpy(float)
            ok = np.isfinite(y) & np.isfinite(z)
            if ok.sum() < 4 or np.ptp(z[ok]) == 0:
                continue
            X = np.column_stack([np.ones(ok.sum()), z[ok]])
            beta, *_ = np.linalg.lstsq(X, y[ok], rcond=None)
            res = y[ok] - X @ beta
            resid_sd.setdefault(ts, []).append(float(np.sqrt(res @ res / (ok.sum() - 2))))
            mean_score.setdefault(ts, []).append(float(np.mean(y[ok])))
    per_testset = {}
    for ts in sorted(resid_sd):
        sd = float(np.median(resid_sd[ts]))
        p = float(np.mean(mean_score[ts]))
        n = (sizes or {}).get(ts)
        entry = {"residual_sd": sd, "mean_score": p, "examples": n}
        if n and 0 <= p <= 1 and sd > 0:
            s = math.sqrt(p * (1 - p) / n)
            share = min(s * s / (sd * sd), 0.95)  # the rest of the residual is never taken below 5 %
            entry.update(sampling_sd=s, sampling_share=share, sampling=math.sqrt(share / (1 - share)))
        per_testset[ts] = entry
    ratios = [e["sampling"] for e in per_testset.values() if "sampling" in e]
    if not ratios:
        notes.append(
            "the sampling noise is not estimated: no testset of the pilot has a known size (an `n` column, "
            "--examples N, or the config's max_examples) and scores in [0, 1]"
        )
    sampling = float(np.median(ratios)) if ratios else 0.0

    phis, med = observed_phi_curve(checkpoints, sampling, seed=seed)
    agree = agreement(pc, settings.alpha, settings.correction, settings.level, settings.near_zero)
    t2m = agree["tau2_models"].to_numpy(float)
    t2r = agree["tau2_runs"].to_numpy(float)
    t2m, t2r = t2m[np.isfinite(t2m)], t2r[np.isfinite(t2r)]
    if not len(t2m):
        notes.append("fewer than 2 models in the pilot: the spread between models is not estimated (0 assumed)")
    at_cap = float(np.mean(ser["phi"].to_numpy(float) >= 0.99))
    return {
        "models": int(long["model"].nunique()),
        "runs": int(len(uniq)),
        "series": int(len(ser)),
        "checkpoints": checkpoints,
        "phi_observed": {
            "median": phi_obs,
            "iqr": _iqr(ser["phi"]),
            "bootstrap_95": [obs_lo, obs_hi],
            "at_cap": at_cap,
            "per_testset": {ts: float(g["phi"].median()) for ts, g in ser.groupby("testset")},
        },
        "phi": {
            "estimate": _true_phi(phi_obs, phis, med),
            "low": _true_phi(obs_lo, phis, med),
            "high": _true_phi(obs_hi, phis, med),
            "how": (
                f"the true AR(1) coefficient whose simulated runs of {checkpoints} checkpoints give the pilot's "
                "median corrected estimate (and the ends of its bootstrap interval over runs)"
            ),
        },
        "sampling": {"estimate": sampling, "iqr": _iqr(ratios), "per_testset": per_testset},
        "model_sd": {
            "estimate": math.sqrt(float(np.median(t2m))) if len(t2m) else 0.0,
            "iqr": [math.sqrt(max(v, 0.0)) if np.isfinite(v) else math.nan for v in _iqr(t2m)],
            "pairs": int(len(t2m)),
        },
        "run_sd": {
            "estimate": math.sqrt(float(np.median(t2r))) if len(t2r) else 0.0,
            "iqr": [math.sqrt(max(v, 0.0)) if np.isfinite(v) else math.nan for v in _iqr(t2r)],
            "pairs": int(len(t2r)),
        },
        "notes": notes,
    }


# ---- the report: base grid, alternatives, costs ------------------------------------------------
def _run_curve(task) -> Curve:
    grid, a, settings, effects, studies, seed = task
    return curve(grid, a, settings, effects, studies, seed)


def curves(tasks, workers: int = 1) -> list[Curve]:
    """:func:`curve` of each ``(grid, assumptions, settings, effects, studies, seed)`` task, in
    ``workers`` processes (each curve is seeded by its own task, so the numbers do not depend on
    how many)."""
    tasks = list(tasks)
    if workers <= 1 or len(tasks) <= 1:
        return [_run_curve(t) for t in tasks]
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    cost = [t[0].models * t[0].runs * t[0].checkpoints ** 2 for t in tasks]
    order = sorted(range(len(tasks)), key=lambda i: -cost[i])  # the longest first
    with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("fork")) as ex:
        done = dict(zip(order, ex.map(_run_curve, [tasks[i] for i in order])))
    return [done[i] for i in range(len(tasks))]


def _at(c: Curve, kind: str, effect: float) -> tuple[float, float]:
    """(power, its standard error) of ``kind`` at ``effect``, interpolated between simulated effects."""
    p = float(np.interp(effect, c.effects, c.power[kind]))
    return p, se_of(p, c.studies * (c.grid.models * c.grid.runs if kind.startswith("cell") else 1))


def report(
    grid: Grid,
    a: Assumptions,
    phis,
    headline: float,
    settings: Settings = Settings(),
    *,
    effects=DEFAULT_EFFECTS,
    studies: int = 400,
    seed: int = 0,
    alternatives=(),
    effect: float = 0.3,
    target: float = 0.8,
    workers: int = 1,
    info: dict | None = None,
) -> dict:
    """Everything ``oodcorr design`` writes, as a JSON-ready dict: the power curves of ``grid`` at
    each phi of ``phis`` (the other assumptions as in ``a``), and at ``headline`` phi the same for
    each of ``alternatives`` (dicts with ``name``, ``description``, ``grid`` (:class:`Grid`),
    ``sampling`` and ``cost``, a dict with at least ``gpu_hours``) with its power at ``effect`` and
    the cheapest that reaches ``target`` per verdict. ``info`` (the config, the budget, the
    assumptions' sources, a pilot's estimates, notes) is copied in."""
    phis = sorted({round(float(p), 4) for p in phis} | {round(float(headline), 4)})
    tasks = [(grid, replace(a, phi=p), settings, tuple(effects), studies, seed) for p in phis]
    alts = [dict(x) for x in alternatives]
    for x in alts:
        tasks.append(
            (x["grid"], replace(a, phi=headline, sampling=x["sampling"]), settings, tuple(effects), studies, seed)
        )
    done = curves(tasks, workers)
    base = done[: len(phis)]
    head = base[phis.index(round(float(headline), 4))]
    for x, c in zip(alts, done[len(phis) :]):
        x["curve"] = c
    options = [{"name": "as configured", "description": "the config's grid", "grid": grid, "curve": head}]
    options[0]["cost"] = (info or {}).get("cost", {})
    options[0]["sampling"] = a.sampling
    options += alts
    rows = []
    for x in options:
        c = x["curve"]
        rows.append(
            {
                "name": x["name"],
                "description": x["description"],
                "grid": asdict(x["grid"]),
                "sampling": x["sampling"],
                "cost": x.get("cost", {}),
                "power_at_effect": {k: dict(zip(("power", "se"), _at(c, k, effect))) for k in VERDICT_POWERS},
                "smallest_effect_80": {k: c.smallest_effect(k, target) for k in VERDICT_POWERS},
            }
        )
    cheapest = {}
    for k in VERDICT_POWERS:
        ok = [r for r in rows if r["power_at_effect"][k]["power"] >= target and r["cost"].get("gpu_hours") is not None]
        cheapest[k] = min(ok, key=lambda r: r["cost"]["gpu_hours"])["name"] if ok else None
    max_se = max(max(s for s in c.se[k]) for c in done for k in VERDICT_POWERS)
    out = dict(info or {})
    out.update(
        grid=asdict(grid),
        assumptions=asdict(a),
        settings=asdict(settings),
        phis=phis,
        headline_phi=float(headline),
        effect=float(effect),
        target=float(target),
        precision={
            "studies": studies,
            "seed": seed,
            "largest_se": max_se,
            "se_at_half": se_of(0.5, studies),
            "how": "Monte Carlo standard error sqrt(p (1 - p) / studies) of each power "
            "(per-run cells: over their runs)",
        },
        curves=[c.to_json() for c in base],
        alternatives=rows,
        cheapest=cheapest,
    )
    return out


def _f(p) -> str:
    return "n/a" if p is None or (isinstance(p, float) and not math.isfinite(p)) else f"{p:.2f}"


def _eff(e) -> str:
    return "> 0.9" if e is None else f"{e:.2f}"


SHORT = {
    "cell": "cell",
    "cell_corrected": "cell (corrected)",
    "generalises": "generalises",
    "sign reversal": "sign reversal",
}


def markdown(rep: dict, budget_markdown: str = "") -> str:
    """The report as markdown (printed by ``oodcorr design`` and written to ``<prefix>.md``)."""
    g, a, st = rep["grid"], rep["assumptions"], rep["settings"]
    src = rep.get("sources", {})
    lines = [
        f"# Design: experiment {rep.get('experiment', '')}".rstrip(),
        "",
        f"Config {rep.get('config', '')}. Written by `oodcorr design`: how often the analysis finds an effect "
        "in studies of this grid, by simulating them and analysing them with the analysis' own procedures "
        "(docs/analysis.md#planning-a-study-oodcorr-design).",
        "",
        "**The grid.** "
        f"{g['models']} models x {g['runs']} runs per pool group (seeds) x {g['checkpoints']} checkpoints per run; "
        f"each table ({rep.get('tables', 1)} in all: {rep.get('tables_how', 'one')}) has {g['pairs']} OOD pairs, "
        f"corrected together ({st['correction']}, alpha {st['alpha']:g}).",
        "",
        "**Assumptions** (what a simulated study is; each can be set by a flag or estimated from a pilot, `--pilot`):",
        "",
        f"* AR(1) coefficient of the residual series (phi): {', '.join(f'{p:g}' for p in rep['phis'])}; "
        f"the alternatives at {rep['headline_phi']:g} ({src.get('phi', 'default')});",
        f"* spread of the true partial correlation between models: sd {a['model_sd']:.2f} on the Fisher z scale "
        f"({src.get('model_sd', 'default: every model shares the effect')}); between runs of a model: "
        f"{a['run_sd']:.2f} ({src.get('run_sd', 'default')});",
        f"* sampling noise of a testset: {a['sampling']:.2f} x the residual series' sd "
        f"({src.get('sampling', 'default: none')});",
        f"* pairs of a table with the effect: {a['non_null_pairs']} (the others null); pairs are independent;",
        "* residualiser linear, method Pearson, the modified t-test per run (the defaults); "
        "effects are partial correlations of the residual series"
        + (" without the sampling noise." if a["sampling"] else "."),
        "",
        f"**Precision.** Every power is a share of {rep['precision']['studies']:,} simulated studies per effect "
        f"(seed {rep['precision']['seed']}): its Monte Carlo standard error is at most "
        f"{rep['precision']['se_at_half']:.3f} (at a power of 0.5), {rep['precision']['largest_se']:.3f} at the "
        "largest here; per-run cells are shares of all the studies' runs. The same draws serve every effect.",
        "",
    ]
    for c in rep["curves"]:
        phi = c["assumptions"]["phi"]
        lines += [
            f"## Power at phi {phi:g}",
            "",
            "| effect | " + " | ".join(SHORT[k] for k in VERDICT_POWERS) + " |",
            "| ---: | " + " | ".join("---:" for _ in VERDICT_POWERS) + " |",
        ]
        for i, e in enumerate(c["effects"]):
            lines.append(f"| {e:.2f} | " + " | ".join(_f(c["power"][k][i]) for k in VERDICT_POWERS) + " |")
        lines.append(
            "| **80 % at** | " + " | ".join(f"**{_eff(c['smallest_effect_80'][k])}**" for k in VERDICT_POWERS) + " |"
        )
        lines.append("")
    lines += [
        "Effect 0 is the null: its row is the false-positive rate of each (per-run cells: the share of null "
        "runs whose interval excludes 0; generalises: of either sign). *cell*: a run's own interval excludes 0; "
        "*cell (corrected)*: significant after the correction across the table's pairs, as the heatmaps mark it; "
        "*generalises*: every model has the effect, the verdict `generalises` with its sign; *sign reversal*: "
        "half the models have +effect and half -effect, the verdict `sign reversal`.",
        "",
        f"## Alternatives (phi {rep['headline_phi']:g}; power at effect {rep['effect']:g})",
        "",
        "| change | grid (models x runs x checkpoints) | GPU-hours (limits) | GPU-hours (work) | "
        + " | ".join(SHORT[k] for k in VERDICT_POWERS)
        + " | 80 % at (cell / corrected / generalises / reversal) |",
        "| --- | --- | ---: | ---: | " + " | ".join("---:" for _ in VERDICT_POWERS) + " | --- |",
    ]
    for r in rep["alternatives"]:
        gg, cost = r["grid"], r["cost"]
        gh = cost.get("gpu_hours")
        gw = cost.get("gpu_hours_work")
        lines.append(
            f"| {r['name']} | {gg['models']} x {gg['runs']} x {gg['checkpoints']} | "
            f"{'n/a' if gh is None else f'{gh:,.0f}'} | {'n/a' if gw is None else f'{gw:,.0f}'} | "
            + " | ".join(_f(r["power_at_effect"][k]["power"]) for k in VERDICT_POWERS)
            + " | "
            + " / ".join(_eff(r["smallest_effect_80"][k]) for k in VERDICT_POWERS)
            + " |"
        )
    lines.append("")
    for k in VERDICT_POWERS:
        name = rep["cheapest"][k]
        lines.append(
            f"* {POWER_LABELS[k]}: "
            + (
                f"the cheapest row reaching {rep['target']:.0%} at effect {rep['effect']:g} is **{name}**"
                if name
                else f"no row reaches {rep['target']:.0%} at effect {rep['effect']:g}"
            )
        )
    lines += [""] + [f"* {r['name']}: {r['description']}" for r in rep["alternatives"][1:]]
    lines += [f"* {n}" for n in rep.get("cost_notes", [])]
    pilot = rep.get("pilot")
    if pilot:
        po, ph = pilot["phi_observed"], pilot["phi"]
        lines += [
            "",
            "## From the pilot",
            "",
            f"{rep.get('pilot_file', '')}: {pilot['models']} models, {pilot['runs']} runs, {pilot['series']} residual "
            f"series, {pilot['checkpoints']} checkpoints per run.",
            "",
            f"* phi: **{ph['estimate']:.2f}** (95 % interval {ph['low']:.2f}-{ph['high']:.2f}, a bootstrap over runs), "
            f"{ph['how']}. The series' own corrected estimates: median {po['median']:.2f}, interquartile range "
            f"{po['iqr'][0]:.2f}-{po['iqr'][1]:.2f}, {po['at_cap']:.0%} at the cap 0.99; median per testset: "
            + ", ".join(f"{t} {v:.2f}" for t, v in po["per_testset"].items())
            + ";",
            f"* sampling noise: {pilot['sampling']['estimate']:.2f} x the residual sd (interquartile range over "
            f"testsets {_f(pilot['sampling']['iqr'][0])}-{_f(pilot['sampling']['iqr'][1])});",
            f"* between models: sd {pilot['model_sd']['estimate']:.2f} (interquartile range over "
            f"{pilot['model_sd']['pairs']} pairs {_f(pilot['model_sd']['iqr'][0])}-{_f(pilot['model_sd']['iqr'][1])}); "
            f"between runs: sd {pilot['run_sd']['estimate']:.2f};",
        ]
        lines += [f"* {n}" for n in pilot["notes"]]
    notes = rep.get("notes", [])
    if notes:
        lines += ["", "## Notes", ""] + [f"* {n}" for n in notes]
    out = "\n".join(lines) + "\n"
    if budget_markdown:
        out += "\n" + budget_markdown.replace("# Budget:", "## Budget of the grid as configured:", 1)
    return out
