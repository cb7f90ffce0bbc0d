"""What every figure shares: headless matplotlib, the atomic PNG write, heatmap panels, the testsets' order."""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd

from ...core.atomic_write import atomic_path

CMAP = "RdBu_r"  # diverging: blue negative, white 0, red positive (vmin=-1, vmax=1)


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save(fig, out_png: str, tight: bool = True) -> None:
    """Write the figure atomically; ``tight`` trims the margins (a second layout pass: slow for many panels)."""
    with atomic_path(out_png) as tmp:
        fig.savefig(tmp, dpi=120, bbox_inches="tight" if tight else None, format="png")
    pyplot().close(fig)


TEXT_LIMIT = 30  # more testsets than this: no numbers in the cells, marks instead, clustered order
MAX_INCHES = 24.0  # a heatmap panel's side never exceeds this (about 2,900 pixels at 120 dpi)


def panel_inches(n_names: int) -> float:
    """A heatmap panel's side for ``n_names`` testsets: half an inch each plus margins, 3.5 to MAX_INCHES."""
    return min(MAX_INCHES, max(3.5, 0.5 * n_names + 1.5))


def grid_shape(n_panels: int) -> tuple[int, int]:
    """(rows, columns) of a near-square grid for ``n_panels`` panels: 2 sit in one row, 3 or 4 in two."""
    cols = max(1, math.ceil(math.sqrt(n_panels)))
    return max(1, math.ceil(n_panels / cols)), cols


def heatmap_figure(plt, n_names: int, n_panels: int, title_lines: int = 3):
    """(figure, flat axes) of ``n_panels`` heatmap panels for ``n_names`` testsets, with room for a colour bar."""
    size = panel_inches(n_names)
    rows, cols = grid_shape(n_panels)
    height = size + 1.0 if rows == 1 else rows * (size + 0.25 * title_lines + 0.5)
    fig, axes = plt.subplots(rows, cols, figsize=((size + 1.5) * cols + 1, height), squeeze=False, layout="constrained")
    flat = list(axes.flat)
    for ax in flat[n_panels:]:
        ax.set_axis_off()
    return fig, flat[:n_panels]


def draw_cells(ax, m: np.ndarray, fade: np.ndarray, present: np.ndarray, big: bool, norm, cmap) -> None:
    """A heatmap's cells: the colour of ``m``, faded where ``fade``, grey where ``present`` but not finite;
    squares for a ``big`` one (imshow would resample it in floating point)."""
    rgba = cmap(norm(np.where(np.isfinite(m), m, 0.0)))
    rgba[fade, :3] = 0.4 * rgba[fade, :3] + 0.6
    rgba[present & ~np.isfinite(m)] = (0.86, 0.86, 0.86, 1.0)
    rgba[~present] = (1, 1, 1, 0)
    if not big:
        ax.imshow((rgba * 255).astype(np.uint8), interpolation="nearest")
        return
    from matplotlib.collections import PolyCollection

    ii, jj = np.nonzero(rgba[..., 3] > 0)
    corners = np.array([(-0.5, -0.5), (0.5, -0.5), (0.5, 0.5), (-0.5, 0.5)])
    verts = np.stack([jj, ii], axis=1)[:, None, :] + corners[None, :, :]
    ax.add_collection(PolyCollection(verts, facecolors=rgba[ii, jj], edgecolors="none", linewidths=0))
    ax.set_aspect("equal")


def blank(ax, text: str) -> None:
    """A panel with nothing to draw, saying why."""
    ax.text(0.5, 0.5, text, ha="center", va="center")
    ax.set_axis_off()


def cell_text(ax, i: int, j: int, text: str, n_names: int, colour: str, bold: bool = False, scale: float = 1.0):
    """The text of a heatmap panel's cell (row ``i``, column ``j``), sized for ``n_names`` testsets."""
    size = max(4.5, min(9.0, 130 / n_names)) * scale
    ax.text(j, i, text, ha="center", va="center", fontsize=size, color=colour, fontweight="bold" if bold else "normal")


def triangle_axes(ax, rows: list[str], cols: list[str], n_names: int, big: bool) -> None:
    """A lower-triangle panel's tick labels (sized for ``n_names`` testsets), limits and no frame."""
    k = len(rows)
    fontsize = max(3.0, min(9.0, 0.8 * 72 * (panel_inches(n_names) - 1.5) / max(k, 1)))
    ax.set_xticks(range(k), cols, rotation=90 if big else 45, ha="center" if big else "right", fontsize=fontsize)
    ax.set_yticks(range(k), rows, fontsize=fontsize)
    ax.set_xlim(-0.5, k - 0.5)
    ax.set_ylim(k - 0.5, -0.5)
    ax.spines[:].set_visible(False)


def pair_matrix(rows: pd.DataFrame, names: list[str], column: str) -> np.ndarray:
    m = np.full((len(names), len(names)), np.nan)
    idx = {n: i for i, n in enumerate(names)}
    i = np.array([idx[x] for x in rows["x"]], dtype=int)
    j = np.array([idx[y] for y in rows["y"]], dtype=int)
    m[np.maximum(i, j), np.minimum(i, j)] = pd.to_numeric(rows[column], errors="coerce").to_numpy(float)
    return m


def cluster_order(rows: pd.DataFrame, names: list[str]) -> list[str]:
    """Testsets ordered by average-linkage clustering on 1 - r (missing r counts as 0), leaves optimally ordered."""
    from scipy.cluster.hierarchy import leaves_list, linkage
    from scipy.spatial.distance import squareform

    if len(names) < 3:
        return list(names)
    m = pair_matrix(rows, names, "r")
    m = np.where(np.isfinite(m), m, 0.0)
    sim = m + m.T
    np.fill_diagonal(sim, 1.0)
    d = np.clip(1.0 - sim, 0.0, 2.0)
    order = leaves_list(linkage(squareform(d, checks=False), method="average", optimal_ordering=len(names) <= 400))
    return [names[i] for i in order]


def natural_key(name: str) -> list:
    """A sort key that puts ``m2`` before ``m10`` (the names of models and testsets)."""
    return [(0, int(t), "") if t.isdigit() else (1, 0, t) for t in re.split(r"(\d+)", name) if t]


def testset_order(rows: pd.DataFrame) -> list[str]:
    names = sorted(set(rows["x"]) | set(rows["y"]))
    return cluster_order(rows, names) if len(names) > TEXT_LIMIT else names
