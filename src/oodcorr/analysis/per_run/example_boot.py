"""The example-level bootstrap of one run: resample each testset's examples (the same at every checkpoint),
recompute every accuracy and every cell, and read the cell's interval from the resampled correlations."""

from __future__ import annotations

import math

import numpy as np

from ..cell.correlate import corr, min_points, residual_pair
from ..cell.resample import cell_rng, interval, intervals
from ..cell.residualise import Degenerate, linear_maker, parse, spline_basis
from ..options import Options


class RunExamples:
    """Per-example correctness of one run: testset -> (units x examples) matrix, and each testset's
    accuracies under ``opts.example_boot`` resamples of its examples (``boot``: (units, B))."""

    def __init__(self, mats: dict, problems: dict, labels: list, opts: Options, model: str, run: str):
        self.labels = labels
        self.mats = mats
        self.problems = problems
        self.boot: dict[str, np.ndarray] = {}
        for ts, mat in mats.items():
            counts = cell_rng(opts.seed, model, run, ts, "examples").multinomial(
                mat.shape[1], np.full(mat.shape[1], 1 / mat.shape[1]), size=opts.example_boot
            )
            # (units x examples) @ (examples x B) / n = accuracies under each resample
            self.boot[ts] = (np.nan_to_num(mat) @ counts.T) / mat.shape[1]
            self.boot[ts][~np.isfinite(mat[:, 0])] = np.nan

    def why_not(self, names, mask) -> str:
        for ts in names:
            if ts in self.problems:
                return self.problems[ts]
            if ts not in self.mats:
                return f"no per-example predictions for {ts}"
            missing = [self.labels[i] for i in np.flatnonzero(mask & ~np.isfinite(self.mats[ts][:, 0]))]
            if missing:
                return f"no per-example predictions for {ts} at unit(s) {missing[:5]}"
        return ""


def _too_few(count: int, opts: Options) -> str:
    return f"only {count} of {opts.example_boot} example resamples gave a value"


def example_ci(rex: RunExamples, zname, a, b, steps, method, res, rp, opts, cache) -> tuple[float, float, str]:
    """One cell's (low, high, note) from the example-level bootstrap: the cell redone on every resample."""
    mask = rp["mask"]
    why = rex.why_not([zname, a, b], mask)
    if why:
        return math.nan, math.nan, why
    rs = []
    for i in range(opts.example_boot):
        z = rex.boot[zname][:, i]
        covars = np.column_stack([z, steps]) if parse(res).step else z
        try:
            q = residual_pair(
                np.where(mask, rex.boot[a][:, i], np.nan),
                rex.boot[b][:, i],
                covars,
                method,
                res,
                opts.gam,
                cache,
                names=(f"{a}#{i}", f"{b}#{i}"),
                lams=(rp["lam_x"], rp["lam_y"]) if parse(res).kind != "linear" else None,
            )
        except Degenerate:
            continue
        rs.append(corr(q["rx"], q["ry"], method))
    rs = np.asarray(rs, dtype=float)
    rs = rs[np.isfinite(rs)]
    if len(rs) < max(2, opts.example_boot / 2):
        return math.nan, math.nan, _too_few(len(rs), opts)
    return (*interval(corr(rp["rx"], rp["ry"], method), rs, opts.level, opts.interval), "")


def pearson_cis(rex: RunExamples, zname: str, cells: list, steps, res: str, opts: Options) -> list:
    """(low, high, note) of the Pearson cells of one spline- or linear-kind residualiser ``res`` at once:
    ``cells`` a list of (x, y, mask, r, lams), each series' spline penalty in ``lams`` (None: the line)."""
    out: list = [None] * len(cells)
    by_mask: dict[bytes, list[int]] = {}
    for k, (a, b, mask, _, _) in enumerate(cells):
        why = rex.why_not([zname, a, b], mask)
        if why:
            out[k] = (math.nan, math.nan, why)
        else:
            by_mask.setdefault(np.asarray(mask, bool).tobytes(), []).append(k)
    spec = parse(res)
    for key, ks in by_mask.items():
        mask = np.frombuffer(key, dtype=bool)
        names = list(dict.fromkeys(t for k in ks for t in cells[k][:2]))
        col = {t: i for i, t in enumerate(names)}
        lams = {t: lam for k in ks for t, lam in zip(cells[k][:2], cells[k][4])}
        z = rex.boot[zname][mask].T  # (B, n)
        X = np.stack([rex.boot[t][mask].T for t in names], axis=-1)  # (B, n, S)
        st = np.asarray(steps, float)[mask] if spec.step else None
        rs = _resampled(z, X, st, min_points(spec, opts.gam))
        if any(lams[t] is not None for t in names):  # each resample's spline residuals replace the line's
            curved = np.array([lams[t] is not None for t in names])
            lam = np.array([np.inf if lams[t] is None else lams[t] for t in names], dtype=float)[curved]
            for b in range(len(z)):
                covars = z[b][:, None] if st is None else np.column_stack([z[b], st])
                basis = spline_basis(covars, opts.gam)
                if basis is None:
                    continue
                bad = np.isnan(rs[b][:, curved])
                got, _ = basis.residuals(X[b][:, curved], lam)
                rs[b][:, curved] = np.where(bad, np.nan, got)
        ia = np.array([col[cells[k][0]] for k in ks])
        ib = np.array([col[cells[k][1]] for k in ks])
        # every resample's Pearson correlations of the residual columns ia and ib (B, pairs), NaN as in corr
        C = rs - rs.mean(1, keepdims=True)
        G = np.einsum("bns,bnu->bsu", C, C)  # (B, S, S): every two testsets' residual products
        ss = np.diagonal(G, axis1=1, axis2=2)
        num = G[:, ia, ib]
        den = np.sqrt(ss[:, ia] * ss[:, ib])
        with np.errstate(invalid="ignore", divide="ignore"):
            got = np.where(den > 0, num / den, np.nan)
        got = np.clip(got, -1.0, 1.0)
        lo, hi = intervals(np.array([cells[k][3] for k in ks]), got, opts.level, opts.interval)
        count = np.isfinite(got).sum(0)
        for j, k in enumerate(ks):
            if count[j] < max(2, opts.example_boot / 2):
                out[k] = (math.nan, math.nan, _too_few(count[j], opts))
            else:
                out[k] = (float(lo[j]), float(hi[j]), "")
    return out


def _resampled(z: np.ndarray, X: np.ndarray, steps, need: int):
    """Every resample's line residuals of the series ``X`` (B, n, S) on its in-domain scores ``z`` (B, n) (and the
    ``steps``), NaN where a cell would be refused."""
    B, n = z.shape
    if n < need:
        return np.full(X.shape, np.nan)
    Z = z[..., None] if steps is None else np.stack([z, np.broadcast_to(steps, (B, n))], axis=-1)
    R = linear_maker(Z) @ X  # each resample's residual maker
    bad = (X.max(1) == X.min(1)) | (np.ptp(z, axis=1) == 0)[:, None]  # (B, S)
    if steps is not None and np.ptp(steps) == 0:
        bad[:] = True
    scale = np.maximum(np.abs(X).max(1), 1e-300)
    bad |= np.sqrt((R * R).sum(1)) <= 1e-10 * scale * math.sqrt(n)
    R[np.broadcast_to(bad[:, None, :], R.shape)] = np.nan
    return R
