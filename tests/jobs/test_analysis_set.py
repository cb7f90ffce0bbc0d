"""Which figures oodcorr analyse draws (oodcorr.jobs.figures.analysis_set.choose), and drawing them in processes."""

import logging
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from oodcorr.analysis import Options
from oodcorr.jobs.figures import analysis_set


def _tables(n_ood: int, models: list[str]):
    """A long table and pairs/agreement tables of the shape choose() reads (values do not matter)."""
    names = [f"t{k:02d}" for k in range(n_ood)]
    long = pd.DataFrame(
        [
            dict(model=m, run="r0", unit=u, testset=t, in_domain="dom", score=0.5)
            for m in models
            for u in (0, 10, 20)
            for t in ["dom", *names]
        ]
    )
    pairs = [(a, b) for i, a in enumerate(names) for b in names[i + 1 :]]
    agree = pd.DataFrame(
        dict(in_domain="dom", pool_group="all runs", x=[a for a, _ in pairs], y=[b for _, b in pairs])
    ).assign(method="pearson", residualiser="linear", verdict="unresolved", r_consensus=0.1)
    pc = pd.DataFrame({"model": models})
    return pc, agree, long


def _kinds(choice):
    return sorted({f.kind for f in choice.figures})


def test_at_a_suites_scale_the_unreadable_per_model_figures_are_left_out_and_said(tmp_path, caplog):
    pc, agree, long = _tables(31, ["a", "b"])
    with caplog.at_level(logging.INFO):
        choice = analysis_set.choose(pc, agree, long, tmp_path, "pearson", "linear", forest_max=3)
    assert _kinds(choice) == ["consensus_heatmap", "forest", "learning_curves"]
    (said,) = choice.left_out
    assert "--all-figures" in said and "31 OOD testsets" in said
    assert choice.consensus_sets == ["dom"] and sum(f.kind == "forest" for f in choice.figures) == 3
    # --all-figures draws them all
    every = analysis_set.choose(pc, agree, long, tmp_path, "pearson", "linear", forest_max=3, all_figures=True)
    assert _kinds(every) == ["consensus_heatmap", "forest", "heatmap", "heatmap_grid", "learning_curves", "scatter"]
    assert every.left_out == []


@pytest.mark.parametrize("n_ood, models", [(30, ["a", "b"]), (149, ["only"])])
def test_small_tables_and_one_model_keep_every_figure(tmp_path, n_ood, models):
    """Up to 30 OOD testsets, or with one model (whose heatmap is the only one), nothing is left out."""
    pc, agree, long = _tables(n_ood, models)
    choice = analysis_set.choose(pc, agree, long, tmp_path, "pearson", "linear", forest_max=0)
    assert choice.left_out == []
    assert {"heatmap", "scatter", "learning_curves"} <= set(_kinds(choice))
    assert ("heatmap_grid" in _kinds(choice)) == (len(models) > 1)


def test_figures_drawn_in_processes_are_those_drawn_here(tmp_path):
    """Two processes draw what one draws: the same figures, the same results."""
    rng = np.random.default_rng(0)
    long = pd.DataFrame(
        [
            dict(model=m, run="r0", unit=u, testset=t, in_domain="dom", score=float(rng.uniform()))
            for m in ("a", "b")
            for u in range(0, 80, 10)
            for t in ("dom", "x", "y", "z")
        ]
    )
    figures = [
        analysis_set.Figure("learning_curves", str(tmp_path / d / f"{m}.png"), {"model": m}, ("long",))
        for d in ("one", "two")
        for m in ("a", "b")
    ]
    one = analysis_set.FigurePool(figures[:2], 1, long=long, opts=Options()).wait()
    two = analysis_set.FigurePool(figures[2:], 2, long=long, opts=Options()).wait()
    assert one == two and all(Path(f.png).stat().st_size > 0 for f in figures)
