"""The figure kinds, one registry (:data:`FIGURES`), and :func:`draw`: one figure drawn the same way for
``oodcorr analyse`` and the workflow's rules, with what an analysis's options decide of it."""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from .across_models import consensus_heatmap, forest
from .curves import learning_curves, scatter, scatter_fits
from .explorer import write_explorer
from .pair_heatmaps import heatmap, heatmap_grid, heatmap_marks


def _consensus(png, opts, t, a):
    return consensus_heatmap(
        t["agree"], png, a["method"], a["residualiser"], a["in_domain"], opts.alpha, opts.near_zero
    )


def _forest(png, opts, t, a):
    x, y = a["pair"]
    return forest(
        t["agree"], t["pc"], png, a["in_domain"], x, y, a["method"], a["residualiser"], opts.near_zero, opts.level
    )


# kind -> drawing function (png, options, tables, arguments); the analysis rules are named for the kinds
# (rule forest_plots draws "forest", one per pair); "explorer" is the page oodcorr analyse writes with them
FIGURES = {
    "consensus_heatmap": _consensus,
    "forest": _forest,
    "heatmap": lambda png, opts, t, a: heatmap(
        t["pc"], a.get("model"), png, a["method"], a["residualiser"], **heatmap_marks(opts)
    ),
    "heatmap_grid": lambda png, opts, t, a: heatmap_grid(
        t["pc"], png, a["method"], a["residualiser"], **heatmap_marks(opts)
    ),
    "learning_curves": lambda png, opts, t, a: learning_curves(
        t["long"], a["model"], png, *a.get("labels", ("training step", "score"))
    ),
    "scatter": lambda png, opts, t, a: scatter(
        t["long"], a["model"], png, residualisers=scatter_fits(opts.residualisers), gam_settings=opts.gam
    ),
    "explorer": lambda png, opts, t, a: write_explorer(t["agreement"], t["pc"], png, **a),
}


def draw(kind: str, out_png: str, opts, tables: Mapping[str, pd.DataFrame], **args) -> dict:
    """One figure of ``kind`` (:data:`FIGURES`) from ``tables`` (the pairs table ``pc``, the agreement
    table ``agree``, the long scores table ``long``) and its ``args`` (``model``, ``in_domain``, ``method``,
    ``residualiser``, ``pair``, learning curves' axis ``labels``)."""
    if kind not in FIGURES:
        raise ValueError(f"unknown figure {kind!r}; known: {', '.join(FIGURES)}")
    return FIGURES[kind](out_png, opts, tables, args)
