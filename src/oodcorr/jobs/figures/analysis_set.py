"""The figure kinds, one registry (:data:`FIGURES`) and :func:`draw`, for ``oodcorr analyse`` and the rules; the
figures of one analysis as ``oodcorr analyse`` draws them: which (:func:`choose`), in processes."""

from __future__ import annotations

import gc
import logging
import multiprocessing
import os
import re
from collections.abc import Mapping
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from ...core.errors import DataError
from . import across_models
from .common import TEXT_LIMIT, pyplot
from .curves import learning_curves, scatter, scatter_fits
from .explorer import EXPLORER_FILE, write_explorer
from .pair_heatmaps import heatmap, heatmap_grid, heatmap_marks

log = logging.getLogger("oodcorr")

# kind -> drawing function (png, options, tables, arguments), as the analysis rules are named; "explorer": the page
FIGURES = {
    "consensus_heatmap": lambda png, opts, t, a: across_models.consensus_heatmap(
        t["agree"], png, a["method"], a["residualiser"], a["in_domain"], opts.alpha, opts.near_zero
    ),
    "forest": lambda png, opts, t, a: across_models.forest(
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


LEGIBLE_TESTSETS = TEXT_LIMIT  # more than this (and more than one model): the per-model figures are left out


def safe_name(name: str) -> str:
    """A model or testset name as a file name: anything but letters, digits, '.', '_' and '-' becomes '_'."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", str(name)).strip("._") or "model"


def check_figure_names(long: pd.DataFrame, source: str) -> None:
    """Refuse two names that become one figure file (:func:`safe_name`, alike but for case too), naming both."""
    for column, what, files in (
        ("model", "models", "heatmaps/, scatter/ and learning_curves/"),
        ("in_domain", "in-domain testsets", "consensus/ and forest/"),
        ("testset", "testsets", "forest/"),
    ):
        seen: dict[str, str] = {}
        for name in sorted(long[column].astype(str).unique()):
            key = safe_name(name).lower()
            if key in seen:
                raise DataError(
                    f"{source}: {what} {seen[key]!r} and {name!r} both become the figure file name "
                    f"{safe_name(name)!r} (in {files}; files differing only in case are one on macOS and Windows): "
                    "one figure would overwrite the other. Rename one in the table, or pass --no-plots"
                )
            seen[key] = name


@dataclass(frozen=True)
class Figure:
    """One figure to draw: its kind, PNG, arguments and the tables it reads (each drawing process holds them)."""

    kind: str
    png: str
    args: dict = field(default_factory=dict)
    tables: tuple[str, ...] = ()


@dataclass
class Choice:
    """What :func:`choose` decided: the figures in drawing order, the consensus sets, a line per kind left out."""

    figures: list[Figure]
    consensus_sets: list[str]
    left_out: list[str]


def choose(
    pc: pd.DataFrame,
    agree: pd.DataFrame,
    long: pd.DataFrame,
    out: Path,
    method: str,
    residualiser: str,
    forest_max: int = across_models.FOREST_CAP,
    forest_pairs: list[str] | None = None,
    all_figures: bool = False,
) -> Choice:
    """Every figure of an analysis; the per-model heatmaps, their grid and the scatter grids are left out
    above :data:`LEGIBLE_TESTSETS` OOD testsets with more than one model unless ``all_figures``."""
    models = sorted(pc["model"].astype(str).unique())
    cells = {"method": method, "residualiser": residualiser}
    figures: list[Figure] = []
    left_out: list[str] = []
    doms = sorted(agree["in_domain"].astype(str).unique()) if len(models) > 1 else []
    named = _named_pairs(agree, forest_pairs) if forest_pairs else None
    for dom in doms:
        agreed = dict(in_domain=dom, **cells)
        figures.append(
            Figure("consensus_heatmap", str(out / "consensus" / f"{safe_name(dom)}.png"), agreed, ("agree",))
        )
        pairs, total = across_models.forest_pairs(agree, dom, method, residualiser, cap=max(forest_max, 0))
        if named is not None:
            every = set(across_models.forest_pairs(agree, dom, method, residualiser, cap=total)[0])
            pairs = [p for p in named if p in every]
        elif len(pairs) < total:
            log.info(
                "forest plots of in-domain %s: %d of its %d pairs (--forest-max %d: the verdicts that say most "
                "first); --forest-pairs X+Y ... draws others, and the explorer page draws every pair's",
                dom,
                len(pairs),
                total,
                forest_max,
            )
        for x, y in pairs:
            png = str(out / "forest" / safe_name(dom) / f"{safe_name(x)}+{safe_name(y)}.png")
            figures.append(Figure("forest", png, dict(pair=(x, y), **agreed), ("agree", "pc")))
    n_ood = max((len(set(g["testset"]) - set(g["in_domain"])) for _, g in long.groupby("model")), default=0)
    big = len(models) > 1 and n_ood > LEGIBLE_TESTSETS and not all_figures
    if big:
        left_out.append(
            f"per-model heatmaps (heatmaps/, heatmap_grid.png) and scatter grids (scatter/) are not drawn: {n_ood} OOD "
            f"testsets is more than {LEGIBLE_TESTSETS} for {len(models)} models; the explorer page shows each model's "
            "correlations, and --all-figures draws them"
        )
    numeric_units = pd.api.types.is_numeric_dtype(long["unit"])
    for m in models:
        png = f"{safe_name(m)}.png"
        if numeric_units:
            figures.append(Figure("learning_curves", str(out / "learning_curves" / png), {"model": m}, ("long",)))
        if not big:
            figures.append(Figure("heatmap", str(out / "heatmaps" / png), dict(model=m, **cells), ("pc",)))
            figures.append(Figure("scatter", str(out / "scatter" / png), {"model": m}, ("long",)))
    if len(models) > 1 and not big:
        figures.append(Figure("heatmap_grid", str(out / "heatmap_grid.png"), cells, ("pc",)))
    elif len(models) <= 1:
        log.info("one model: no side-by-side grid (heatmap_grid.png), no consensus heatmap or forest plot to draw")
    # the costliest first, so that two processes finish together
    cost = {"heatmap_grid": 0, "consensus_heatmap": 1, "scatter": 2, "heatmap": 3, "learning_curves": 4, "forest": 5}
    figures.sort(key=lambda f: cost.get(f.kind, 9))
    return Choice(figures, doms, left_out)


def _named_pairs(agree: pd.DataFrame, given: list[str]) -> list[tuple[str, str]]:
    """``--forest-pairs X+Y ...`` as sorted (x, y) pairs, each an OOD pair of the agreement table."""
    known = {tuple(sorted((str(x), str(y)))) for x, y in zip(agree["x"], agree["y"])}
    out = []
    for item in given:
        x, sep, y = item.partition("+")
        pair = tuple(sorted((x.strip(), y.strip())))
        if not sep or pair not in known:
            shown = ", ".join(f"{a}+{b}" for a, b in sorted(known)[:6])
            raise DataError(f"--forest-pairs {item}: not an OOD pair of the agreement table; its pairs include {shown}")
        out.append(pair)
    return list(dict.fromkeys(out))


# the tables and options the drawing processes read: set before the fork, so each inherits them
_HELD: dict = {}
# the columns the figures read: the long text columns (notes, intervals as text) stay out of the drawing processes
FIGURE_COLUMNS = {
    "pc": (
        *("model", "in_domain", "run", "pool_group", "x", "y", "method", "residualiser", "r", "ci_low", "ci_high"),
        *("p", "p_adj", "significant", "conclusion", "depends_on_form", "n_runs", "correction"),
        *("r_corrected", "ci_low_corrected", "ci_high_corrected"),
    ),
    "agree": (
        *("in_domain", "pool_group", "x", "y", "method", "residualiser", "verdict", "r_consensus"),
        *("ci_low_consensus", "ci_high_consensus", "pi_low_consensus", "pi_high_consensus"),
        *("tol_low_consensus", "tol_high_consensus", "n_models_consensus", "correction"),
        *("about", "noise_limited", "r_consensus_eiv", "ci_low_consensus_eiv", "ci_high_consensus_eiv"),
        *("r_consensus_corrected", "ci_low_consensus_corrected", "ci_high_consensus_corrected"),
        *(f"reliability_{side}{end}" for side in ("x", "y", "in_domain") for end in ("", "_low")),
    ),
}


def explorer_page(out: Path, title: str, settings: dict, answer: list[str], default: tuple[str, str]) -> Figure:
    """The explorer page (:func:`.explorer.write_explorer`) as one more task of a :class:`FigurePool`."""
    args = dict(title=title, settings=settings, answer=list(answer), default=default)
    return Figure("explorer", str(out / EXPLORER_FILE), args, ("agreement", "pc"))


def _draw(fig: Figure) -> dict:
    return draw(fig.kind, fig.png, _HELD.get("opts"), {k: _HELD[k] for k in fig.tables}, **fig.args)


def default_workers() -> int:
    """Drawing processes: the cores this process may use, at most 2 (figures are many and small)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(2, cores))


class FigurePool:
    """Draws :class:`Figure` s in ``workers`` forked processes while the caller goes on; :meth:`wait` returns them."""

    def __init__(self, figures: list[Figure], workers: int, **held):
        self.figures = figures
        _HELD.clear()
        for name, table in held.items():
            keep = FIGURE_COLUMNS.get(name)
            _HELD[name] = table[[c for c in table.columns if c in keep]] if keep else table
        self.pool = None
        self.futures = []
        if workers > 1 and len(figures) > 1:
            pyplot()  # matplotlib imported once, before the fork, not once per process
            # shared with the processes page for page while nothing writes to it, as the garbage collector would
            gc.freeze()
            ctx = multiprocessing.get_context("fork")
            self.pool = ProcessPoolExecutor(max_workers=min(workers, len(figures)), mp_context=ctx)
            self.futures = [self.pool.submit(_draw, f) for f in figures]

    def wait(self) -> list[dict]:
        try:
            if self.pool is None:
                return [_draw(f) for f in self.figures]
            return [f.result() for f in self.futures]
        finally:
            if self.pool is not None:
                self.pool.shutdown(cancel_futures=True)
                gc.unfreeze()
            _HELD.clear()
