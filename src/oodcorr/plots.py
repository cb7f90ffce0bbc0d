"""Figures: partial-correlation heatmaps (lower triangle, diverging, centred on 0)."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from .io import atomic_path


def _matrix(summary: pd.DataFrame, names: list[str], column: str) -> np.ndarray:
    m = np.full((len(names), len(names)), np.nan)
    idx = {n: i for i, n in enumerate(names)}
    for _, row in summary.iterrows():
        i, j = idx[row["x"]], idx[row["y"]]
        m[max(i, j), min(i, j)] = row[column]
    return m


def heatmap(summary: pd.DataFrame, model: str, out_png: str) -> dict:
    """One panel per in-domain set; NaN cells are hatched and labelled 'n/a'.

    Returns {(in_domain, row testset, column testset): cell label} of what was drawn.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sub = summary[summary["model"] == model]
    panels = sorted(sub["in_domain"].unique()) or [""]
    size = max(3.5, 0.9 * len(set(sub["x"]) | set(sub["y"])) + 1.5)
    fig, axes = plt.subplots(1, len(panels), figsize=(size * len(panels) + 1, size), squeeze=False)
    im = None
    cells = {}
    for ax, dom in zip(axes[0], panels):
        s = sub[sub["in_domain"] == dom]
        names = sorted(set(s["x"]) | set(s["y"]))
        if len(names) < 2:
            ax.text(0.5, 0.5, "no pair of OOD testsets\n(fewer than two evaluated)", ha="center", va="center")
            ax.set_axis_off()
            continue
        m = _matrix(s, names, "r_mean")[1:, :-1]  # strict lower triangle: drop the empty row/column
        sig = _matrix(s, names, "n_significant")[1:, :-1]
        fin = _matrix(s, names, "n_runs_finite")[1:, :-1]
        rows, cols = names[1:], names[:-1]
        im = ax.imshow(np.ma.masked_invalid(m), cmap="RdBu_r", vmin=-1, vmax=1)
        for i in range(len(rows)):
            for j in range(i + 1):
                v = m[i, j]
                if math.isfinite(v):
                    star = "*" if fin[i, j] > 0 and sig[i, j] == fin[i, j] else ""
                    cells[(dom, rows[i], cols[j])] = f"{v:+.2f}{star}"
                    ax.text(j, i, cells[(dom, rows[i], cols[j])], ha="center", va="center", fontsize=9,
                            color="white" if abs(v) > 0.6 else "black")
                else:
                    ax.add_patch(plt.Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, hatch="///",
                                               edgecolor="grey", lw=0))
                    cells[(dom, rows[i], cols[j])] = "n/a"
                    ax.text(j, i, "n/a", ha="center", va="center", fontsize=8, color="grey")
        ax.set_xticks(range(len(cols)), cols, rotation=45, ha="right")
        ax.set_yticks(range(len(rows)), rows)
        n_runs = int(s["n_runs"].max()) if len(s) else 0
        ax.set_title(f"{model}\nin-domain: {dom} ({n_runs} run{'s' if n_runs != 1 else ''}; * p<0.05 in every run)",
                     fontsize=10)
        for spine in ax.spines.values():
            spine.set_visible(False)
    if im is not None:
        fig.colorbar(im, ax=axes[0].tolist(), shrink=0.8, label="partial r (in-domain regressed out)")
    with atomic_path(out_png) as tmp:
        fig.savefig(tmp, dpi=120, bbox_inches="tight", format="png")
    plt.close(fig)
    return cells
