"""Residualisers: remove what the covariates (in-domain score, optionally the training
step) explain from one score series.

A residualiser is named by a spec: ``linear`` or ``gam``, optionally followed by
``+step`` to add the training step as a second covariate (``gam+step``). Each
returns the residuals, the effective degrees of freedom it used (the intercept
included) and its *residual-maker* matrix ``R`` (residuals = ``R @ y``: ``I - H``
for OLS, ``I - S`` for the GAM's smoother matrix at the chosen penalty), which
:mod:`.inference` needs to know how the residualiser shapes the residuals'
dependence; or it raises :class:`Degenerate` with the reason, which the caller
turns into a NaN cell with that reason in ``note``.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from ..core.defaults import ANALYSIS as DEFAULTS

KINDS = ("linear", "gam")
RESIDUALISERS = ("linear", "linear+step", "gam", "gam+step")


class Degenerate(ValueError):
    """A cell cannot be computed; the message says why and becomes its ``note``."""


@dataclass(frozen=True)
class Spec:
    kind: str  # "linear" | "gam"
    step: bool  # training step as a second covariate

    @property
    def name(self) -> str:
        return self.kind + ("+step" if self.step else "")

    @property
    def n_covariates(self) -> int:
        return 2 if self.step else 1


def parse(name: str) -> Spec:
    """``gam+step`` -> Spec("gam", True); an unknown name raises ValueError naming it."""
    kind, _, extra = name.partition("+")
    if kind not in KINDS or extra not in ("", "step"):
        raise ValueError(f"unknown residualiser {name!r}; choose from {', '.join(RESIDUALISERS)}")
    return Spec(kind, extra == "step")


@dataclass(frozen=True)
class GamSettings:
    """Penalised regression splines (pygam ``LinearGAM``), smoothness chosen by GCV.

    ``n_splines`` is the basis size per covariate, capped at half the points (and at
    least 4, the minimum for cubic splines); ``lam_grid`` is the GCV grid of the
    smoothing penalty. The penalty is on the second derivative, so a large penalty
    shrinks towards a straight line: the GAM can only add flexibility to the linear
    fit, never less than it. Below ``min_points`` complete points the GAM is not
    fitted (NaN with a note): GCV over a handful of points is noise.
    """

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
    """``I - X pinv(X)`` for X = [1, Z]: the OLS residual-maker matrix. ``Z`` (n, k), or a stack
    (runs, n, k) of covariates: one matrix per run."""
    if Z.ndim == 3:
        X = np.concatenate([np.ones((*Z.shape[:2], 1)), Z], axis=2)
        return np.eye(Z.shape[1]) - X @ np.linalg.pinv(X)
    X = np.column_stack([np.ones(len(Z)), Z])
    return np.eye(len(Z)) - X @ np.linalg.pinv(X)


def gam_maker(fitted, Z: np.ndarray) -> np.ndarray:
    """``I - S`` for the fitted LinearGAM's smoother matrix ``S`` at its penalty.

    pygam solves the penalised least squares ``(B'B + P + sqrt(eps) I) b = B'y`` in one
    step for the identity link (its PIRLS loop converges at once), so
    ``S = B (B'B + P + sqrt(eps) I)^-1 B'``; the caller checks ``S y`` against the
    fitted values."""
    B = fitted._modelmat(Z).toarray()
    P = fitted._P().toarray()
    A = B.T @ B + P + np.sqrt(np.finfo(float).eps) * np.eye(B.shape[1])
    return np.eye(len(Z)) - B @ np.linalg.solve(A, B.T)


def gam_fit(y: np.ndarray, Z: np.ndarray, settings: GamSettings, lam=None):
    """Fit a LinearGAM with one spline term per column of ``Z``.

    With ``lam`` None the penalty is chosen by GCV over ``settings.lam_grid`` (the same
    penalty for every term: a diagonal grid, which keeps two-covariate fits cheap);
    otherwise it is fitted at the given penalty. Returns the fitted model.
    """
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


def gam(y: np.ndarray, Z: np.ndarray, settings: GamSettings, lam=None):
    """GAM residuals: (residuals, effective dof incl. intercept, chosen penalty, residual maker)."""
    n = len(y)
    if n < settings.min_points:
        raise Degenerate(f"only {n} complete points; the GAM residualiser needs at least {settings.min_points}")
    try:
        fitted = gam_fit(y, Z, settings, lam)
    except Degenerate:
        raise
    except Exception as e:  # pygam raises assorted errors on singular or diverging fits
        raise Degenerate(f"the GAM fit failed: {type(e).__name__}: {e}") from None
    res = y - fitted.predict(Z)
    if not np.all(np.isfinite(res)):
        raise Degenerate("the GAM fit gave non-finite residuals")
    R = gam_maker(fitted, Z)
    scale = max(float(np.abs(y).max()), 1e-300)
    if not np.allclose(R @ y, res, rtol=0, atol=1e-8 * scale):
        raise Degenerate("the GAM's smoother matrix does not reproduce its fit (pygam internals changed?)")
    return res, float(fitted.statistics_["edof"]), fitted.lam, R


def residualise(y: np.ndarray, Z: np.ndarray, spec: Spec, gam_settings: GamSettings, lam=None):
    """Dispatch on ``spec.kind``: (residuals, dof used, penalty or None, residual maker)."""
    if spec.kind == "linear":
        r, dof = linear(y, Z)
        return r, dof, None, linear_maker(Z)
    return gam(y, Z, gam_settings, lam)


def one_blas_thread():
    """A context in which BLAS runs on one thread: the per-run procedure multiplies thousands of
    matrices of a few dozen rows, where a second BLAS thread costs three times the time it saves
    (22 against 69 us per run of 21 checkpoints on 2 cores); parallel work is split over processes
    (the design's curves, the analysis' runs), each on one BLAS thread."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - a dependency of the pinned environment
        import contextlib

        return contextlib.nullcontext()
    return threadpool_limits(limits=1, user_api="blas")
