"""The pairs heatmaps: one model's (:func:`heatmap`) and every model's side by side (:func:`heatmap_grid`)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ...core.answer import NEAR_ZERO, UNRESOLVED
from .common import (
    CMAP,
    TEXT_LIMIT,
    blank,
    cell_text,
    draw_cells,
    heatmap_figure,
    pair_matrix,
    pyplot,
    save,
    testset_order,
    triangle_axes,
)


def _flag(rows: pd.DataFrame, column: str, value) -> pd.DataFrame:
    return rows.assign(_f=(rows[column] == value).astype(float)) if column in rows else rows.assign(_f=0.0)


def _panel(ax, rows: pd.DataFrame, names: list[str], title: str, plt) -> tuple[object, dict]:
    """Strict lower triangle of r, marked: '*' significant, faded unresolved, boxed near zero, '†' depends
    on the form, hatched 'n/a' no value; beyond TEXT_LIMIT testsets no numbers, dots and squares."""
    cells = {}
    if len(names) < 2:
        blank(ax, "no pair of OOD testsets\n(fewer than two evaluated)")
        ax.set_title(title, fontsize=9)
        return None, cells
    m = pair_matrix(rows, names, "r")[1:, :-1]
    sig = pair_matrix(rows.assign(_f=rows["significant"].astype(float)), names, "_f")[1:, :-1] == 1
    unresolved = pair_matrix(_flag(rows, "conclusion", UNRESOLVED), names, "_f")[1:, :-1] == 1
    near = pair_matrix(_flag(rows, "conclusion", NEAR_ZERO), names, "_f")[1:, :-1] == 1
    curved = pair_matrix(_flag(rows, "depends_on_form", True), names, "_f")[1:, :-1] == 1
    present = np.isfinite(pair_matrix(rows.assign(_f=1.0), names, "_f")[1:, :-1])
    rnames, cnames = names[1:], names[:-1]
    k = len(rnames)
    import matplotlib as mpl

    norm = mpl.colors.Normalize(vmin=-1, vmax=1)
    cmap = mpl.colormaps[CMAP]
    big = len(names) > TEXT_LIMIT
    draw_cells(ax, m, unresolved & np.isfinite(m), present, big, norm, cmap)
    im = mpl.cm.ScalarMappable(norm=norm, cmap=cmap)
    if big:
        ii, jj = np.nonzero(sig & np.isfinite(m))
        ax.scatter(jj, ii, s=max(1.0, 400 / k), c="black", marker="o", linewidths=0)
        ii, jj = np.nonzero(near & np.isfinite(m))
        ax.scatter(jj, ii, s=max(2.0, 900 / k), facecolors="none", edgecolors="dimgrey", marker="s", linewidths=0.4)
        ii, jj = np.nonzero(curved & np.isfinite(m))
        ax.scatter(jj, ii, s=max(2.0, 900 / k), c="black", marker="x", linewidths=0.5)
    for i, j in zip(*np.nonzero(np.tril(np.ones((k, k), bool)) & present)):
        v = m[i, j]
        key = (rnames[i], cnames[j])
        cells[key] = f"{v:+.2f}{'*' if sig[i, j] else ''}{'†' if curved[i, j] else ''}" if math.isfinite(v) else "n/a"
        if big:
            continue
        if math.isfinite(v):
            colour = "dimgrey" if unresolved[i, j] else ("white" if abs(v) > 0.6 else "black")
            cell_text(ax, i, j, cells[key], len(names), colour, sig[i, j])
            if near[i, j]:
                ax.add_patch(plt.Rectangle((j - 0.45, i - 0.45), 0.9, 0.9, fill=False, lw=0.8, edgecolor="dimgrey"))
        else:
            ax.add_patch(plt.Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, hatch="///", edgecolor="grey", lw=0))
            cell_text(ax, i, j, "n/a", len(names), "dimgrey", scale=0.85)
    triangle_axes(ax, rnames, cnames, len(names), big)
    ax.set_title(title, fontsize=9)
    return im, cells


def describe(
    rows: pd.DataFrame,
    big: bool = False,
    alpha: float | None = None,
    level: float | None = None,
    near_zero: float | None = None,
) -> str:
    """The panel's legend in numbers: runs, the correction and its family size, the marks."""
    if rows.empty:
        return ""
    n_runs = int(pd.to_numeric(rows["n_runs"], errors="coerce").max())
    runs = f"{n_runs} run{'s' if n_runs != 1 else ''}"
    group = rows["pool_group"].iloc[0] if "pool_group" in rows else ""
    if group and group != "all runs":
        runs += f" ({group})"
    corr = rows["correction"].iloc[0]
    tested = int(np.isfinite(pd.to_numeric(rows["p"], errors="coerce")).sum())
    a = f"{alpha:g}" if alpha is not None else "alpha"
    how = {"holm": "Holm", "bh": "Benjamini-Hochberg", "none": "no correction"}.get(corr, corr)
    star = "dot" if big else "*"
    if tested:
        lines = [f"{runs}; {star}: p_adj < {a} ({how} across {tested} pairs)"]
    else:
        lines = [f"{runs}; no p-values (the table's note column says why)"]
    lv = f"{100 * level:g}% " if level is not None else ""
    nz = f"{near_zero:g}" if near_zero is not None else "near_zero"
    marks = [f"faded: {lv}interval spans 0", f"{'square' if big else 'boxed'}: interval within ±{nz}"]
    if "depends_on_form" in rows and (rows["depends_on_form"] == True).any():  # noqa: E712
        marks.append(f"{'x' if big else '†'}: the line concludes otherwise (depends on the form)")
    lines.append("; ".join(marks))
    return "\n".join(lines)


def heatmap_marks(opts) -> dict:
    """The marks of :func:`heatmap` and :func:`heatmap_grid` an analysis's options set (alpha, level, near_zero)."""
    return dict(alpha=opts.alpha, level=opts.level, near_zero=opts.near_zero)


def _heatmaps(pc: pd.DataFrame, model: str | None, out_png: str, method: str, residualiser: str, marks: dict):
    """``model``'s panels, or (None) every model's in one testset order. Returns [(panel key, its cells)]."""
    plt = pyplot()
    sub = pc if model is None else pc[pc["model"] == model]
    sub = sub[(sub["method"] == method) & (sub["residualiser"] == residualiser) & (sub["run"] == "pooled")]
    cols = [c for c in (["model"] if model is None else []) + ["in_domain", "pool_group"] if c in sub.columns]
    keys = [dict(zip(cols, k)) for k in sorted({tuple(v) for v in sub[cols].astype(str).itertuples(index=False)})]
    per = [(k, sub[(sub[list(k)].astype(str) == pd.Series(k)).all(axis=1)]) for k in keys or [dict.fromkeys(cols, "")]]
    if model is None:
        shared = testset_order(sub.drop_duplicates(["x", "y"])) if len(sub) else []
        n_names = len(shared)
    else:
        n_names = max([len(set(r["x"]) | set(r["y"])) for _, r in per] + [2])
    fig, axes = heatmap_figure(plt, n_names, len(per))
    drawn, im = [], None
    for ax, (key, rows) in zip(axes, per):
        names = shared if model is None else testset_order(rows)
        legend = describe(rows, len(names) > TEXT_LIMIT, **marks)
        if model is None:
            title = f"{key.get('model', '')}, in-domain {key.get('in_domain', '')}\n{legend}"
        else:
            title = f"{model}: {method}, {residualiser} residualiser, in-domain {key.get('in_domain', '')}\n{legend}"
        got, cells = _panel(ax, rows, names, title, plt)
        im = got or im
        drawn.append((key, cells))
    if im is not None:
        bar = f"partial r ({method}, {residualiser})" if model is None else "partial r (in-domain regressed out)"
        fig.colorbar(im, ax=axes, shrink=0.8, label=bar)
    save(fig, out_png, tight=n_names <= TEXT_LIMIT)  # constrained layout already fits a big one
    return drawn


def heatmap(pc: pd.DataFrame, model: str, out_png: str, method: str, residualiser: str, **marks) -> dict:
    """One panel per in-domain set and pool group for ``model``. Returns {(in_domain, row, col): label}."""
    drawn = _heatmaps(pc, model, out_png, method, residualiser, marks)
    return {(key.get("in_domain", ""), *k): v for key, cells in drawn for k, v in cells.items()}


def heatmap_grid(pc: pd.DataFrame, out_png: str, method: str, residualiser: str, **marks) -> dict:
    """Every model's panels in a near-square grid, in one testset order. Returns {(model, in_domain): n cells}."""
    out: dict = {}
    for key, cells in _heatmaps(pc, None, out_png, method, residualiser, marks):
        at = (key.get("model", ""), key.get("in_domain", ""))
        out[at] = out.get(at, 0) + len(cells)
    return out
