"""Curves: learning, in-domain vs OOD scatter with the fitted residualisers, training loss, design power."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from ...core.io import read_json
from ..series_checkpoint import MANIFEST_FIX
from .common import blank, pyplot, save

LEGEND_LIMIT = 25  # more testsets than this: the learning curves get no legend


def learning_curves(
    long: pd.DataFrame, model: str, out_png: str, x_label: str = "training step", y_label: str = "score"
) -> dict:
    """Score vs step per testset, one panel per in-domain set (in black). Returns {in_domain: testsets}."""
    plt = pyplot()
    sub = long[long["model"] == model]
    panels = sorted(sub["in_domain"].unique()) or [""]
    fig, axes = plt.subplots(1, len(panels), figsize=(6.5 * len(panels), 4.2), squeeze=False)
    drawn = {}
    for ax, dom in zip(axes[0], panels):
        rows = sub[sub["in_domain"] == dom]
        if rows.empty or not pd.api.types.is_numeric_dtype(rows["unit"]):
            blank(ax, "units are not training steps:\nno learning curve")
            continue
        names = sorted(set(rows["testset"]) - {dom}) + [dom]
        colours = plt.get_cmap("tab20")(np.linspace(0, 1, max(len(names) - 1, 1)))
        # one split of the rows by testset, then arrays: dozens of testsets cost no pandas call each
        by_testset = dict(tuple(rows.groupby("testset", sort=False)))
        for k, ts in enumerate(names):
            g = by_testset[ts]
            col = "black" if ts == dom else colours[k]
            unit, score = g["unit"].to_numpy(), g["score"].to_numpy(float)
            run_of = g["run"].astype(str).to_numpy()
            for r in sorted(set(run_of)):
                at = np.flatnonzero(run_of == r)
                at = at[np.argsort(unit[at], kind="stable")]
                ax.plot(unit[at], score[at], color=col, alpha=0.25, lw=0.8)
            units, inv = np.unique(unit, return_inverse=True)
            ok = np.isfinite(score)
            with np.errstate(invalid="ignore"):
                mean = np.bincount(inv[ok], score[ok], len(units)) / np.bincount(inv[ok], minlength=len(units))
            ax.plot(
                units,
                mean,
                color=col,
                lw=2.6 if ts == dom else 1.6,
                label=f"{ts} (in-domain)" if ts == dom else ts,
                marker="o",
                ms=2.5,
            )
        drawn[dom] = names
        n_runs = rows["run"].nunique()
        legend = len(names) <= LEGEND_LIMIT
        extra = "" if legend else f"; {len(names) - 1} OOD testsets, too many to label: see the scores table"
        ax.set(
            xlabel=x_label,
            ylabel=y_label,
            title=f"{model}, in-domain {dom} ({n_runs} run{'s' if n_runs != 1 else ''}; bold: mean{extra})",
        )
        ax.grid(alpha=0.3)
        if legend:
            ax.legend(fontsize=7, loc="best", ncol=1 + len(names) // 12)
    save(fig, out_png)
    return drawn


def _fit_curve(z: np.ndarray, v: np.ndarray, residualiser: str, gam_settings, grid: np.ndarray):
    from ...analysis.cell.residualise import gam_fit, parse, spline_basis  # scipy: only a fit needs it

    spec = parse(residualiser)
    if spec.step:
        return None  # a two-covariate fit is not one curve over the in-domain score
    basis = spline_basis(z[:, None], gam_settings) if spec.kind == "spline" else None
    if spec.kind == "linear" or (spec.kind == "spline" and basis is None):
        return np.polyval(np.polyfit(z, v, 1), grid)
    if basis is not None:  # the fit at the points, joined: the curve the residuals are taken from
        res, _ = basis.residuals(v[:, None], basis.choose(v[:, None]))
        order = np.argsort(z, kind="stable")
        return np.interp(grid, z[order], (v - res[:, 0])[order])
    if len(z) < gam_settings.min_points:
        return None
    try:
        return gam_fit(v, z[:, None], gam_settings).predict(grid[:, None])
    except Exception:  # noqa: BLE001 -- a GAM that cannot be fitted draws no curve
        return None


def scatter_fits(residualisers) -> list[str]:
    """The residualisers :func:`scatter` draws: those of the in-domain score alone, and the line beside them."""
    return list(dict.fromkeys([r for r in residualisers if "+" not in r] + ["linear"]))


def scatter(
    long: pd.DataFrame,
    model: str,
    out_png: str,
    residualisers=("spline", "linear"),
    gam_settings=None,
    max_panels: int = 48,
) -> dict:
    """In-domain vs OOD score per OOD testset with each run's fitted curves. Returns {testset: curves drawn}."""
    from ...analysis.cell.residualise import GamSettings  # pandas/scipy: only the analysis commands pay their start-up

    plt = pyplot()
    gam_settings = gam_settings or GamSettings()
    sub = long[long["model"] == model]
    doms = sorted(sub["in_domain"].unique())
    panels = [(dom, ts) for dom in doms for ts in sorted(set(sub.loc[sub.in_domain == dom, "testset"]) - {dom})]
    shown = panels[:max_panels]
    ncol = min(6, max(1, len(shown)))
    nrow = max(1, math.ceil(len(shown) / ncol))
    # one in-domain set: one x axis for every panel, its tick labels only at the bottom of each column
    share = len({d for d, _ in shown}) == 1
    fig, axes = plt.subplots(nrow, ncol, figsize=(2.8 * ncol, 2.5 * nrow), squeeze=False, sharex=share)
    styles = {"spline": ("-", 1.4, "solid"), "linear": (":", 1.1, "dotted"), "gam": ("--", 1.4, "dashed")}
    runs = sorted(sub["run"].unique())
    colours = dict(zip(runs, plt.get_cmap("tab10")(np.linspace(0, 1, max(len(runs), 1)))))
    drawn = {}
    wides = {
        dom: {
            run: g.pivot_table(index="unit", columns="testset", values="score", aggfunc="first")
            for run, g in sub[sub["in_domain"] == dom].groupby("run")
        }
        for dom in {d for d, _ in shown}
    }
    for k, (ax, (dom, ts)) in enumerate(zip(axes.flat, shown)):
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
                    ls, lw, _ = styles.get(res.split("+")[0], ("-", 1, "solid"))
                    ax.plot(grid, curve, ls=ls, lw=lw, color=colours[run])
                    n_curves += 1
        drawn[ts] = n_curves
        ax.set_title(ts, fontsize=8)
        ax.tick_params(labelsize=6)
        ax.locator_params(nbins=4)
        if not share or k + ncol >= len(shown):
            ax.xaxis.set_tick_params(labelbottom=True)
            ax.set_xlabel(f"{dom} (in-domain)", fontsize=6)
    for ax in list(axes.flat)[len(shown) :]:
        ax.set_axis_off()
    legend = ", ".join(f"{r}: {styles.get(r, ('-', 1, 'solid'))[2]}" for r in residualisers if "+" not in r)
    extra = f" (first {max_panels} of {len(panels)} testsets)" if len(panels) > max_panels else ""
    fig.suptitle(f"{model}: OOD vs in-domain score, one colour per run; fitted {legend}{extra}", fontsize=9, y=0.995)
    fig.subplots_adjust(hspace=0.45, wspace=0.35, top=1 - 0.55 / (2.5 * nrow))  # tight_layout is slow for many panels
    save(fig, out_png, tight=False)
    return drawn


DESIGN_LINES = {  # power kind of oodcorr.analysis.design -> (label, colour, line style)
    "cell": ("per-run cell", "0.45", "--"),
    "cell_corrected": ("per-run cell, corrected", "0.2", "-"),
    "average sign": ("sign on average", "#ef8a62", "-"),
    "generalises": ("sign in nearly every model", "#b2182b", "-"),
    "sign reversal": ("sign reversal", "#2166ac", "-"),
}


def design_power(report: dict, out_png: str) -> dict:
    """``oodcorr design``'s figure: power against effect per AR(1) phi, a line (±2 Monte Carlo SE) per verdict."""
    plt = pyplot()
    panels = report["curves"]
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.8), sharey=True, squeeze=False)
    drawn = []
    for ax, c in zip(axes[0], panels):
        e = np.asarray(c["effects"])
        for kind, (label, colour, style) in DESIGN_LINES.items():
            p, se = np.asarray(c["power"][kind]), np.asarray(c["se"][kind])
            ax.plot(e, p, style, color=colour, label=label, lw=1.6)
            ax.fill_between(e, np.clip(p - 2 * se, 0, 1), np.clip(p + 2 * se, 0, 1), color=colour, alpha=0.15, lw=0)
            drawn.append((c["assumptions"]["phi"], kind))
        ax.axhline(report["target"], color="0.6", ls=":", lw=1)
        g = c["grid"]
        ax.set_title(
            f"phi {c['assumptions']['phi']:g}: {g['models']} models x {g['runs']} runs x {g['checkpoints']}", fontsize=9
        )
        ax.set_xlabel("effect (partial correlation)")
        ax.set_ylim(-0.02, 1.02)
        ax.set_xlim(0, max(e))
    axes[0][0].set_ylabel("power (share of simulated studies)")
    axes[0][-1].legend(fontsize=8, loc="lower right")
    fig.suptitle(
        f"{report.get('experiment', '')}: {report['grid']['pairs']} pairs per table, "
        f"{report['precision']['studies']} simulated studies per point",
        fontsize=10,
    )
    save(fig, out_png)
    return {"panels": len(panels), "lines": drawn}


def training_loss_curves(manifests: list[str], model: str, out_png: str) -> dict:
    """The training loss against the step, one line per run of ``model``, from each manifest's ``loss_history``."""
    fig, ax = pyplot().subplots(figsize=(6.5, 4.2))
    drawn = {}
    for path in sorted(manifests):
        man = read_json(path, "a run's manifest", MANIFEST_FIX)
        hist = (man.get("loss_history") if isinstance(man, dict) else None) or []
        label = "/".join(Path(path).parent.parts[-3:])  # <in_domain>/n<N>/seed<S>
        if hist:
            ax.plot([h["step"] for h in hist], [h["loss"] for h in hist], lw=1.2, marker="o", ms=2, label=label)
        drawn[label] = len(hist)
    if not any(drawn.values()):
        ax.text(
            0.5,
            0.5,
            "no loss logged: the runs' checkpoints existed already,\nso nothing was trained",
            ha="center",
            va="center",
            transform=ax.transAxes,
        )
    n = len(drawn)
    ax.set(
        xlabel="training step",
        ylabel="training loss (cross-entropy)",
        title=f"{model}: training loss ({n} run{'s' if n != 1 else ''})",
    )
    ax.grid(alpha=0.3)
    if any(drawn.values()):
        ax.legend(fontsize=7, loc="best", ncol=1 + n // 12)
    save(fig, out_png)
    return drawn
