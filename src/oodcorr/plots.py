"""Figures (matplotlib, Agg): heatmaps, a grid of heatmaps across models, learning
curves, and in-domain vs OOD scatter plots with the fitted residualiser curves.

Every function takes the analysis tables, writes one PNG atomically, and returns a
small dict describing what it drew (used by the tests).
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from .io import atomic_path

CMAP = "RdBu_r"  # diverging: blue negative, white 0, red positive (vmin=-1, vmax=1)


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, out_png: str) -> None:
    with atomic_path(out_png) as tmp:
        fig.savefig(tmp, dpi=120, bbox_inches="tight", format="png")
    _plt().close(fig)


def select(pc: pd.DataFrame, method: str, residualiser: str, run: str = "pooled") -> pd.DataFrame:
    """The rows one heatmap shows: one method, one residualiser, pooled (or one run)."""
    return pc[(pc["method"] == method) & (pc["residualiser"] == residualiser) & (pc["run"] == run)]


def _matrix(rows: pd.DataFrame, names: list[str], column: str) -> np.ndarray:
    m = np.full((len(names), len(names)), np.nan)
    idx = {n: i for i, n in enumerate(names)}
    for x, y, v in zip(rows["x"], rows["y"], rows[column]):
        i, j = idx[x], idx[y]
        m[max(i, j), min(i, j)] = float(v)
    return m


def _panel(ax, rows: pd.DataFrame, names: list[str], title: str, plt) -> tuple[object, dict]:
    """Strict lower triangle of r; '*' where significant; NaN cells hatched 'n/a'."""
    cells = {}
    if len(names) < 2:
        ax.text(0.5, 0.5, "no pair of OOD testsets\n(fewer than two evaluated)", ha="center", va="center")
        ax.set_axis_off()
        ax.set_title(title, fontsize=9)
        return None, cells
    m = _matrix(rows, names, "r")[1:, :-1]
    sig = _matrix(rows.assign(significant=rows["significant"].astype(float)), names, "significant")[1:, :-1]
    present = _matrix(rows.assign(_one=1.0), names, "_one")[1:, :-1]
    rnames, cnames = names[1:], names[:-1]
    im = ax.imshow(np.ma.masked_invalid(m), cmap=CMAP, vmin=-1, vmax=1)
    fs = max(4.5, min(9.0, 130 / len(names)))
    for i in range(len(rnames)):
        for j in range(i + 1):
            v = m[i, j]
            key = (rnames[i], cnames[j])
            if math.isfinite(v):
                cells[key] = f"{v:+.2f}{'*' if sig[i, j] == 1 else ''}"
                ax.text(j, i, cells[key], ha="center", va="center", fontsize=fs,
                        color="white" if abs(v) > 0.6 else "black")
            elif present[i, j] == 1:
                ax.add_patch(plt.Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, hatch="///",
                                           edgecolor="grey", lw=0))
                cells[key] = "n/a"
                ax.text(j, i, "n/a", ha="center", va="center", fontsize=fs * 0.85, color="dimgrey")
    ax.set_xticks(range(len(cnames)), cnames, rotation=45, ha="right", fontsize=max(5.0, fs))
    ax.set_yticks(range(len(rnames)), rnames, fontsize=max(5.0, fs))
    ax.set_title(title, fontsize=9)
    for spine in ax.spines.values():
        spine.set_visible(False)
    return im, cells


def _describe(rows: pd.DataFrame) -> str:
    if rows.empty:
        return ""
    corr = rows["correction"].iloc[0]
    n_runs = int(rows["n_runs"].max())
    runs = f"{n_runs} run{'s' if n_runs != 1 else ''}"
    return f"{runs}; * p_adj < alpha ({corr})"


def heatmap(pc: pd.DataFrame, model: str, out_png: str, method: str, residualiser: str,
            run: str = "pooled") -> dict:
    """One panel per in-domain set for ``model``. Returns {(in_domain, row, col): label}."""
    plt = _plt()
    sub = select(pc[pc["model"] == model], method, residualiser, run)
    panels = sorted(sub["in_domain"].unique()) or [""]
    n_names = max([len(set(sub.loc[sub.in_domain == d, "x"]) | set(sub.loc[sub.in_domain == d, "y"]))
                   for d in panels] + [2])
    size = max(3.5, 0.5 * n_names + 1.5)
    fig, axes = plt.subplots(1, len(panels), figsize=((size + 1.5) * len(panels) + 1, size + 0.6), squeeze=False,
                             layout="constrained")
    cells, im = {}, None
    for ax, dom in zip(axes[0], panels):
        rows = sub[sub["in_domain"] == dom]
        names = sorted(set(rows["x"]) | set(rows["y"]))
        title = f"{model}: {method}, {residualiser} residualiser\nin-domain {dom}\n{_describe(rows)}"
        got, c = _panel(ax, rows, names, title, plt)
        im = got or im
        cells.update({(dom, *k): v for k, v in c.items()})
    if im is not None:
        fig.colorbar(im, ax=axes[0].tolist(), shrink=0.8, label="partial r (in-domain regressed out)")
    _save(fig, out_png)
    return cells


def heatmap_grid(pc: pd.DataFrame, out_png: str, method: str, residualiser: str, run: str = "pooled") -> dict:
    """Side by side: one panel per model (and in-domain set), the same testset order in
    every panel, one shared colour scale. Returns {(model, in_domain): n cells drawn}."""
    plt = _plt()
    sub = select(pc, method, residualiser, run)
    keys = sorted({(m, d) for m, d in zip(sub["model"], sub["in_domain"])}) or [("", "")]
    names = sorted(set(sub["x"]) | set(sub["y"]))
    size = max(3.5, 0.5 * len(names) + 1.5)
    fig, axes = plt.subplots(1, len(keys), figsize=((size + 1.5) * len(keys) + 1, size + 0.6), squeeze=False,
                             layout="constrained")
    out, im = {}, None
    for ax, (model, dom) in zip(axes[0], keys):
        rows = sub[(sub["model"] == model) & (sub["in_domain"] == dom)]
        got, c = _panel(ax, rows, names, f"{model}\nin-domain {dom}\n{_describe(rows)}", plt)
        im = got or im
        out[(model, dom)] = len(c)
    if im is not None:
        fig.colorbar(im, ax=axes[0].tolist(), shrink=0.8, label=f"partial r ({method}, {residualiser})")
    _save(fig, out_png)
    return out


def learning_curves(long: pd.DataFrame, model: str, out_png: str) -> dict:
    """Score vs step per testset: one thin line per run, the mean over runs bold; the
    in-domain testset in black. One panel per in-domain set. Returns {in_domain: testsets}."""
    plt = _plt()
    sub = long[long["model"] == model]
    panels = sorted(sub["in_domain"].unique()) or [""]
    fig, axes = plt.subplots(1, len(panels), figsize=(6.5 * len(panels), 4.2), squeeze=False)
    drawn = {}
    for ax, dom in zip(axes[0], panels):
        rows = sub[sub["in_domain"] == dom]
        if rows.empty or not pd.api.types.is_numeric_dtype(rows["unit"]):
            ax.text(0.5, 0.5, "units are not training steps:\nno learning curve", ha="center", va="center")
            ax.set_axis_off()
            continue
        names = sorted(set(rows["testset"]) - {dom}) + [dom]
        colours = plt.get_cmap("tab20")(np.linspace(0, 1, max(len(names) - 1, 1)))
        for k, ts in enumerate(names):
            g = rows[rows["testset"] == ts]
            col = "black" if ts == dom else colours[k]
            for _, run in g.groupby("run"):
                run = run.sort_values("unit")
                ax.plot(run["unit"], run["score"], color=col, alpha=0.25, lw=0.8)
            mean = g.groupby("unit")["score"].mean()
            ax.plot(mean.index, mean.to_numpy(), color=col, lw=2.6 if ts == dom else 1.6,
                    label=f"{ts} (in-domain)" if ts == dom else ts, marker="o", ms=2.5)
        drawn[dom] = names
        n_runs = rows["run"].nunique()
        ax.set(xlabel="training step", ylabel="score",
               title=f"{model}, in-domain {dom} ({n_runs} run{'s' if n_runs != 1 else ''}; bold: mean)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="best", ncol=1 + len(names) // 12)
    _save(fig, out_png)
    return drawn


def _fit_curve(z: np.ndarray, v: np.ndarray, residualiser: str, gam_settings, grid: np.ndarray):
    from .analysis.residualise import Degenerate, gam_fit, parse

    spec = parse(residualiser)
    if spec.step:
        return None  # a two-covariate fit is not one curve over the in-domain score
    if spec.kind == "linear":
        beta = np.polyfit(z, v, 1)
        return np.polyval(beta, grid)
    if len(z) < gam_settings.min_points:
        return None
    try:
        return gam_fit(v, z[:, None], gam_settings).predict(grid[:, None])
    except (Degenerate, Exception):
        return None


def scatter(long: pd.DataFrame, model: str, out_png: str, residualisers=("linear", "gam"),
            gam_settings=None, max_panels: int = 48) -> dict:
    """In-domain vs OOD score, one small panel per OOD testset, points coloured by run,
    with each run's fitted residualiser curve(s) (the residuals are the vertical
    distances to it). Returns {testset: number of curves drawn}."""
    from .analysis.residualise import GamSettings

    plt = _plt()
    gam_settings = gam_settings or GamSettings()
    sub = long[long["model"] == model]
    panels = []
    for dom in sorted(sub["in_domain"].unique()):
        for ts in sorted(set(sub.loc[sub.in_domain == dom, "testset"]) - {dom}):
            panels.append((dom, ts))
    shown = panels[:max_panels]
    ncol = min(6, max(1, len(shown)))
    nrow = max(1, math.ceil(len(shown) / ncol))
    fig, axes = plt.subplots(nrow, ncol, figsize=(2.8 * ncol, 2.5 * nrow), squeeze=False)
    styles = {"linear": ("-", 1.2), "gam": ("--", 1.4)}
    runs = sorted(sub["run"].unique())
    colours = dict(zip(runs, plt.get_cmap("tab10")(np.linspace(0, 1, max(len(runs), 1)))))
    drawn = {}
    wides = {dom: {run: g.pivot_table(index="unit", columns="testset", values="score", aggfunc="first")
                   for run, g in sub[sub["in_domain"] == dom].groupby("run")}
             for dom in {d for d, _ in shown}}
    for ax, (dom, ts) in zip(axes.flat, shown):
        n_curves = 0
        for run, w in wides[dom].items():
            if dom not in w or ts not in w:
                continue
            pts = w[[dom, ts]].dropna()
            z, v = pts[dom].to_numpy(float), pts[ts].to_numpy(float)
            ax.scatter(z, v, s=8, color=colours[run], alpha=0.7)
            if len(z) < 3 or np.ptp(z) == 0:
                continue
            grid = np.linspace(z.min(), z.max(), 60)
            for res in residualisers:
                curve = _fit_curve(z, v, res, gam_settings, grid)
                if curve is not None:
                    ls, lw = styles.get(res.split("+")[0], ("-", 1))
                    ax.plot(grid, curve, ls=ls, lw=lw, color=colours[run])
                    n_curves += 1
        drawn[ts] = n_curves
        ax.set_title(ts, fontsize=8)
        ax.tick_params(labelsize=6)
        ax.locator_params(nbins=4)
        ax.set_xlabel(f"{dom} (in-domain)", fontsize=6)
    for ax in list(axes.flat)[len(shown):]:
        ax.set_axis_off()
    kinds = [r for r in residualisers if "+" not in r]
    legend = ", ".join(f"{r}: {'solid' if r == 'linear' else 'dashed'}" for r in kinds)
    extra = f" (first {max_panels} of {len(panels)} testsets)" if len(panels) > max_panels else ""
    fig.suptitle(f"{model}: OOD vs in-domain score, one colour per run; fitted {legend}{extra}", fontsize=9, y=0.995)
    fig.subplots_adjust(hspace=0.75, wspace=0.35, top=1 - 0.55 / (2.5 * nrow))  # tight_layout is slow for many panels
    _save(fig, out_png)
    return drawn
