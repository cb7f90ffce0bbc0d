"""The forest plot of one OOD pair (oodcorr.jobs.answer_figures.forest) and the pairs oodcorr analyse draws."""

from __future__ import annotations

import numpy as np
import pandas as pd
from PIL import Image

from oodcorr.analysis import Options, agreement, analyse
from oodcorr.analysis.simulate import study_table
from oodcorr.jobs import answer_figures, plots


def _study(n_models=16, n_runs=3, seed=3):
    rng = np.random.default_rng(seed)
    table = study_table(rng, list(np.linspace(0.2, 0.6, n_models)), n_runs, 21, 0.5, n_ood=3)
    opts = Options(methods=("pearson",), residualisers=("linear",), step0_check=False)
    pc = analyse(table, opts)
    return pc, agreement(pc, opts.alpha, opts.agreement_correction, opts.level, opts.near_zero), opts


def test_a_forest_plot_has_a_row_per_model_the_consensus_and_the_verdict(tmp_path):
    pc, agree, opts = _study()
    d = str(agree["in_domain"].iloc[0])
    row = agree.iloc[0]
    png = tmp_path / "f.png"
    drawn = plots.draw(
        "forest",
        str(png),
        opts,
        agree=agree,
        pc=pc,
        in_domain=d,
        pair=(row.y, row.x),
        method="pearson",
        residualiser="linear",
    )  # the pair given the other way round: the same rows
    (panel,) = drawn.values()
    assert len(panel["models"]) == 16 and panel["verdict"] == row.verdict
    assert panel["consensus"].startswith(f"{row.r_consensus:+.2f} [")
    assert panel["prediction"] == f"[{row.pi_low_consensus:+.2f}, {row.pi_high_consensus:+.2f}]"
    assert panel["tolerance"] == f"[{row.tol_low_consensus:+.2f}, {row.tol_high_consensus:+.2f}]"
    assert row.tol_low_consensus < row.tol_high_consensus
    w, h = Image.open(png).size
    assert h >= 900 and w >= 800  # 16 rows at 120 dpi: readable, not squeezed


def test_two_models_have_no_prediction_interval_and_say_so(tmp_path):
    pc, agree, opts = _study(n_models=2, n_runs=1)
    row = agree.iloc[0]
    drawn = answer_figures.forest(
        agree, pc, str(tmp_path / "f.png"), str(row.in_domain), row.x, row.y, "pearson", "linear"
    )
    (panel,) = drawn.values()
    assert panel["prediction"] == panel["tolerance"] == "none (fewer than 3 models)"


def test_forest_pairs_are_all_up_to_the_cap_then_the_telling_verdicts_first():
    rows = []
    for i, (verdict, r) in enumerate(
        [("unresolved", 0.9), ("sign reversal", 0.1), ("positive in nearly every model", 0.4), ("unresolved", 0.2)]
    ):
        rows.append(
            {
                "in_domain": "d",
                "pool_group": "all runs",
                "x": f"a{i}",
                "y": f"b{i}",
                "method": "pearson",
                "residualiser": "linear",
                "verdict": verdict,
                "r_consensus": r,
            }
        )
    agree = pd.DataFrame(rows)
    assert answer_figures.forest_pairs(agree, "d", "pearson", "linear") == (
        [("a0", "b0"), ("a1", "b1"), ("a2", "b2"), ("a3", "b3")],
        4,
    )
    assert answer_figures.forest_pairs(agree, "d", "pearson", "linear", cap=2) == ([("a1", "b1"), ("a2", "b2")], 4)
    assert answer_figures.forest_pairs(agree, "d", "pearson", "linear", cap=3)[0] == [
        ("a0", "b0"),
        ("a1", "b1"),
        ("a2", "b2"),
    ]
