"""Residualisers: remove what the covariates (in-domain score, optionally the step) explain from a score series."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ...core.defaults import ANALYSIS as DEFAULTS


@dataclass(frozen=True)
class _Kind:
    """What a kind of residualiser is, read wherever the analysis treats the kinds apart."""

    curve: bool  # follows a curve: the line of the same covariates is its check (:mod:`.form_check`)
    # a fixed linear smoother (the line, or the spline with its penalty chosen once): its Pearson cells are
    # corrected for item noise and their example bootstrap runs batched
    smoother: bool
    simulated_by: str  # the kind the design's simulated runs are analysed with (:mod:`.power`)


# the kinds by name; each is offered alone and with the training step as a second covariate (``+step``)
KINDS = {
    "spline": _Kind(curve=True, smoother=True, simulated_by="spline"),
    "linear": _Kind(curve=False, smoother=True, simulated_by="linear"),
    "gam": _Kind(curve=True, smoother=False, simulated_by="spline"),
}
RESIDUALISERS = tuple(kind + step for kind in KINDS for step in ("", "+step"))


class Degenerate(ValueError):
    """A cell cannot be computed; the message says why and becomes its ``note``."""


@dataclass(frozen=True)
class Spec:
    kind: str  # a key of KINDS
    step: bool  # training step as a second covariate

    @property
    def name(self) -> str:
        return self.kind + ("+step" if self.step else "")

    @property
    def n_covariates(self) -> int:
        return 2 if self.step else 1

    @property
    def line(self) -> str:
        """The line of the same covariates: a curve's check, and whose cell measures the noise of another's."""
        return Spec("linear", self.step).name

    @property
    def curve(self) -> bool:
        return KINDS[self.kind].curve

    @property
    def smoother(self) -> bool:
        return KINDS[self.kind].smoother


def parse(name: str) -> Spec:
    """``spline+step`` -> Spec("spline", True); an unknown name raises ValueError naming it."""
    kind, _, extra = name.partition("+")
    if kind not in KINDS or extra not in ("", "step"):
        raise ValueError(f"unknown residualiser {name!r}; choose from {', '.join(RESIDUALISERS)}")
    return Spec(kind, extra == "step")


@dataclass(frozen=True)
class GamSettings:
    """The curves' settings (``analysis.gam`` of a config): both ``spline`` and pygam's ``gam``."""

    n_splines: int = DEFAULTS["gam"]["n_splines"]
    min_points: int = DEFAULTS["gam"]["min_points"]
    lam_grid: tuple[float, ...] = tuple(np.logspace(-3, 5, 17))

    def basis_size(self, n: int) -> int:
        return max(4, min(self.n_splines, n // 2))


def linear(y: np.ndarray, Z: np.ndarray) -> tuple[np.ndarray, float]:
    """OLS of ``y`` on an intercept plus the columns of ``Z``: (residuals, dof used)."""
    X = np.column_stack([np.ones(len(y)), Z])
    beta, *_ = np.linalg.lstsq(X, y, rcond=None)
    return y - X @ beta, float(X.shape[1])


def linear_maker(Z: np.ndarray) -> np.ndarray:
    """``I - X pinv(X)`` for X = [1, Z] (Z (n, k), or a stack (B, n, k)): the OLS residual-maker matrix."""
    X = np.concatenate([np.ones((*Z.shape[:-1], 1)), Z], axis=-1)
    return np.eye(Z.shape[-2]) - X @ np.linalg.pinv(X)


# the penalties a series' spline is chosen among, as multiples of the basis' largest squared singular
# value (then an infinite one: the line); REML picks one per series (:meth:`SplineBasis.choose`)
_LAM_RATIOS = np.logspace(-7, 5, 49)


@lru_cache(maxsize=8)
def _penalty_directions(size: int) -> np.ndarray:
    """(size, size - 2): the combinations of ``size`` cubic B-splines on [0, 1] whose ridge penalty is the
    curve's integrated squared second derivative (the mixed-model form)."""
    from scipy.interpolate import BSpline

    t = _knots(size)
    # the second derivatives are linear between knots, their products quadratic: Simpson's rule on
    # each knot interval integrates them exactly
    edges = np.unique(t)
    a, b = edges[:-1], edges[1:]
    pts = np.concatenate([a, (a + b) / 2, b])
    w = np.concatenate([(b - a) / 6, 4 * (b - a) / 6, (b - a) / 6])
    D2 = BSpline(t, np.eye(size), 3).derivative(2)(pts)
    e, E = np.linalg.eigh(D2.T @ (w[:, None] * D2))
    # the line is the penalty's null space: its two smallest eigenvalues, 0
    directions = E[:, 2:] / np.sqrt(e[2:])
    directions.setflags(write=False)  # cached: shared by every caller
    return directions


def _knots(size: int) -> np.ndarray:
    return np.concatenate([np.zeros(3), np.linspace(0, 1, size - 2), np.ones(3)])


def _cubic_penalised(x: np.ndarray, size: int) -> np.ndarray:
    """The penalised part of a cubic regression spline of ``x`` (in [0, 1]) with ``size`` B-splines."""
    from scipy.interpolate import BSpline

    B = BSpline.design_matrix(np.clip(x, 0.0, 1.0), _knots(size), 3).toarray()
    return B @ _penalty_directions(size)


@dataclass(frozen=True)
class SplineBasis:
    """What a spline residualiser needs of the covariates, shared by every series residualised on them."""

    Q0: np.ndarray
    W: np.ndarray
    d: np.ndarray

    def choose(self, Y: np.ndarray) -> np.ndarray:
        """Each column's penalty by restricted maximum likelihood (the curve's coefficients random,
        the line's fixed): ``Y`` (n, m) -> (m,) penalties, ``inf`` where the line is likeliest."""
        if not len(self.d):
            return np.full(Y.shape[1], np.inf)
        return reml_choose(self.Q0[None], self.W[None], reml_grid(self.d[None]), Y[None])[0]

    def residuals(self, Y: np.ndarray, lam: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Residuals of the columns of ``Y`` (n, m) at their penalties ``lam`` (m,), and each fit's
        effective degrees of freedom (the trace of its smoother, the line's 2 included)."""
        keep = shrink(self.d, lam)  # (m, q)
        fitted = self.Q0 @ (self.Q0.T @ Y) + self.W @ (keep.T * (self.W.T @ Y))
        return Y - fitted, self.Q0.shape[1] + keep.sum(1)

    def maker(self, lam: float) -> np.ndarray:
        """``I - S`` at penalty ``lam``: the residual maker of one series."""
        return spline_makers(self.Q0[None], self.W[None], self.d[None], np.array([[lam]], dtype=float))[0, 0]


def reml_grid(d: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """REML's penalties (B, L), each direction's share kept at each (B, L, q) and log determinant (B, L)."""
    lams = np.concatenate([_LAM_RATIOS[None] * d.max(1, keepdims=True), np.full((len(d), 1), np.inf)], axis=1)
    keep = shrink(d[:, None], lams)
    with np.errstate(divide="ignore"):
        logdet = -np.log1p(-keep).sum(-1)
    return lams, keep, logdet


def reml_choose(Q0: np.ndarray, W: np.ndarray, grid: tuple, Y: np.ndarray) -> np.ndarray:
    """:meth:`SplineBasis.choose` of each run's columns ``Y`` (B, n, m), with its :func:`reml_grid`: (B, m)."""
    n, p0 = Q0.shape[1:]
    lams, keep, logdet = grid
    Yp = Y - Q0 @ (np.swapaxes(Q0, -1, -2) @ Y)
    c2 = (np.swapaxes(W, -1, -2) @ Yp) ** 2  # (B, q, m)
    total = np.einsum("bnm,bnm->bm", Yp, Yp)
    # residual sum of squares in the REML metric: each direction's square over (1 + d / lam)
    quad = total[:, None] - keep @ c2  # (B, L, m)
    crit = logdet[..., None] + (n - p0) * np.log(np.maximum(quad, 1e-300) / (n - p0))
    return np.take_along_axis(lams, np.argmin(crit, axis=1), axis=1)


def shrink(d: np.ndarray, lam) -> np.ndarray:
    """(..., q): each direction's share ``d / (d + lam)`` kept at each penalty ``lam`` (none at an infinite one)."""
    lam = np.asarray(lam, dtype=float)[..., None]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(np.isinf(lam), 0.0, d / (d + lam))


def spline_makers(Q0: np.ndarray, W: np.ndarray, d: np.ndarray, lam: np.ndarray) -> np.ndarray:
    """``I - S`` of each run at each of its penalties ``lam`` (B, m): (B, m, n, n)."""
    n = Q0.shape[1]
    keep = shrink(d[:, None], lam)  # (B, m, q)
    line = np.eye(n) - Q0 @ np.swapaxes(Q0, -1, -2)
    Wt = np.swapaxes(W, -1, -2)[:, None]
    return line[:, None] - (W[:, None] * keep[:, :, None, :]) @ Wt


def spline_bases(Z: np.ndarray, settings: GamSettings) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """The spline bases ``(Q0, W, d)`` of each run's covariates ``Z`` (B, n, k) at once; None where a run has fewer
    than 4 distinct values of a covariate. A direction a run's points do not reach (a knot interval without points,
    ties) keeps its place with d = 0, which no penalty lets into a fit."""
    B, n, k = Z.shape
    distinct = 1 + (np.diff(np.sort(Z, axis=1), axis=1) > 0).sum(1)  # (B, k)
    if np.any(distinct < 4):
        return None
    size = settings.basis_size(n)
    scaled = (Z - Z.min(1, keepdims=True)) / np.ptp(Z, axis=1)[:, None, :]
    Q0, _ = np.linalg.qr(np.concatenate([np.ones((B, n, 1)), scaled], axis=2))
    Xp = np.concatenate([_cubic_penalised(scaled[:, :, j].ravel(), size).reshape(B, n, -1) for j in range(k)], axis=2)
    Xp = Xp - Q0 @ (np.swapaxes(Q0, -1, -2) @ Xp)
    W, sv, _ = np.linalg.svd(Xp, full_matrices=False)
    return Q0, W, np.where(sv > 1e-8 * sv.max(axis=1, keepdims=True), sv**2, 0.0)


def spline_basis(Z: np.ndarray, settings: GamSettings) -> SplineBasis | None:
    """The :class:`SplineBasis` of the covariates ``Z`` (n, k); None where no curve can be fitted."""
    got = spline_bases(Z[None], settings) if len(Z) >= settings.min_points else None
    if got is None:
        return None
    Q0, W, d = (a[0] for a in got)
    return SplineBasis(Q0, W[:, d > 0], d[d > 0])


def gam_fit(y: np.ndarray, Z: np.ndarray, settings: GamSettings, lam=None):
    from pygam import LinearGAM, s

    n, k = Z.shape
    ns = settings.basis_size(n)
    terms = s(0, n_splines=ns)
    for j in range(1, k):
        terms = terms + s(j, n_splines=ns)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if lam is None:
            gam = LinearGAM(terms).gridsearch(Z, y, lam=np.asarray(settings.lam_grid), progress=False)
        else:
            gam = LinearGAM(terms, lam=lam).fit(Z, y)
    if not getattr(gam, "_is_fitted", False):
        raise Degenerate("the GAM could not be fitted at any smoothing penalty")
    return gam


def gam_residuals(y: np.ndarray, Z: np.ndarray, settings: GamSettings, lam=None):
    """GAM residuals: (residuals, effective dof incl. intercept, chosen penalty, residual maker)."""
    try:
        fitted = gam_fit(y, Z, settings, lam)
    except Degenerate:
        raise
    except Exception as e:  # pygam raises assorted errors on singular or diverging fits
        raise Degenerate(f"the GAM fit failed: {type(e).__name__}: {e}") from None
    res = y - fitted.predict(Z)
    if not np.all(np.isfinite(res)):
        raise Degenerate("the GAM fit gave non-finite residuals")
    B = fitted._modelmat(Z).toarray()  # R = I - S, S the fitted LinearGAM's smoother matrix at its penalty
    A = B.T @ B + fitted._P().toarray() + np.sqrt(np.finfo(float).eps) * np.eye(B.shape[1])
    R = np.eye(len(Z)) - B @ np.linalg.solve(A, B.T)
    scale = max(float(np.abs(y).max()), 1e-300)
    if not np.allclose(R @ y, res, rtol=0, atol=1e-8 * scale):
        raise Degenerate("the GAM's smoother matrix does not reproduce its fit (pygam internals changed?)")
    return res, float(fitted.statistics_["edof"]), fitted.lam, R
