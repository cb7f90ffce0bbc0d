"""The figure kinds, one registry (:data:`FIGURES`), and :func:`draw`, for ``oodcorr analyse`` and the rules."""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from .across_models import consensus_heatmap, forest
from .curves import learning_curves, scatter, scatter_fits
from .explorer import write_explorer
from .pair_heatmaps import heatmap, heatmap_grid, heatmap_marks

# kind -> drawing function (png, options, tables, arguments), as the analysis rules are named; "explorer": the page
FIGURES = {
    "consensus_heatmap": lambda png, opts, t, a: consensus_heatmap(
        t["agree"], png, a["method"], a["residualiser"], a["in_domain"], opts.alpha, opts.near_zero
    ),
    "forest": lambda png, opts, t, a: forest(
        t["agree"], t["pc"], png, a["in_domain"], *a["pair"], a["method"], a["residualiser"], opts.near_zero, opts.level
    ),
    "heatmap": lambda png, opts, t, a: heatmap(
        t["pc"], a.get("model"), png, a["method"], a["residualiser"], **heatmap_marks(opts)
    ),
    "heatmap_grid": lambda png, opts, t, a: heatmap_grid(
        t["pc"], png, a["method"], a["residualiser"], **heatmap_marks(opts)
    ),
    "learning_curves": lambda png, opts, t, a: learning_curves(t["long"], a["model"], png, *a.get("labels", ())),
    "scatter": lambda png, opts, t, a: scatter(
        t["long"], a["model"], png, residualisers=scatter_fits(opts.residualisers), gam_settings=opts.gam
    ),
    "explorer": lambda png, opts, t, a: write_explorer(t["agreement"], t["pc"], png, **a),
}


def draw(kind: str, out_png: str, opts, tables: Mapping[str, pd.DataFrame], **args) -> dict:
    """One figure of ``kind`` (:data:`FIGURES`) from ``tables`` (``pc``, ``agree``, ``long``) and its ``args``."""
    return FIGURES[kind](out_png, opts, tables, args)
