"""The forest plot of one OOD pair (oodcorr.jobs.figures.across_models.forest), the pairs oodcorr analyse draws,
and what both figures of the answer show of the scores as measurements (reliabilities, noise-limited
pairs, the tasks' correlations)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from oodcorr.analysis import Options, agreement, analyse
from oodcorr.analysis.simulate.runs import study_table
from oodcorr.jobs.figures import across_models, analysis_set
from oodcorr.jobs.figures.analysis_set import draw

from helpers import measured_study


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
    drawn = draw(
        "forest",
        str(png),
        opts,
        dict(agree=agree, pc=pc),
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
    drawn = across_models.forest(
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
    assert across_models.forest_pairs(agree, "d", "pearson", "linear") == (
        [("a0", "b0"), ("a1", "b1"), ("a2", "b2"), ("a3", "b3")],
        4,
    )
    assert across_models.forest_pairs(agree, "d", "pearson", "linear", cap=2) == ([("a1", "b1"), ("a2", "b2")], 4)
    assert across_models.forest_pairs(agree, "d", "pearson", "linear", cap=3)[0] == [
        ("a0", "b0"),
        ("a1", "b1"),
        ("a2", "b2"),
    ]


# ---- the scores as measurements -------------------------------------------------------------
@pytest.fixture(scope="module")
def measured():
    return measured_study()


def _interval(est, lo, hi) -> str:
    return (f"{est:+.2f} " if np.isfinite(est) else "no estimate ") + f"[{lo:+.2f}, {hi:+.2f}]"


def _heatmap(monkeypatch, agree, path):
    """The consensus heatmap of ``agree`` and its figure (kept for reading its texts)."""
    kept = []
    save = across_models.save
    monkeypatch.setattr(across_models, "save", lambda fig, png, tight=True: (kept.append(fig), save(fig, png, tight)))
    cells = across_models.consensus_heatmap(agree, str(path), "pearson", "linear", "in-domain", 0.05, 0.3)
    (fig,) = kept
    (ax,) = [a for a in fig.axes if a.get_title()]
    texts = {
        "x": [t.get_text() for t in ax.get_xticklabels()],
        "y": [t.get_text() for t in ax.get_yticklabels()],
        "title": ax.get_title(),
        "legend": [t.get_text() for t in fig.legends[0].get_texts()] if fig.legends else [],
    }
    return cells, texts


def test_a_noise_limited_cell_is_marked_apart_and_each_testset_shows_its_reliability(measured, tmp_path, monkeypatch):
    agree = measured["bound"][1]
    (row,) = agree.to_dict("records")
    assert row["verdict"] == "noise-limited" and row["noise_limited"].startswith("ood1 (")
    cells, texts = _heatmap(monkeypatch, agree, tmp_path / "bound.png")
    assert cells[("all runs", "ood1", "ood0")] == f"{row['r_consensus']:+.2f}∿ (noise-limited)"
    # only sizes known: each reliability is its bound's low end
    assert texts["x"] == [f"ood0 (≥{row['reliability_x_low']:.2f})"]
    assert texts["y"] == [f"ood1 (≥{row['reliability_y_low']:.2f})"]
    assert texts["title"].startswith(f"in-domain in-domain (≥{row['reliability_in_domain_low']:.2f}): consensus")
    assert "the answer is about the tasks (in-domain noise bounded by its size)" in texts["title"]
    assert any(t.startswith("∿ in a dotted frame: noise-limited") for t in texts["legend"])
    assert not any(t.startswith("faded: unresolved") for t in texts["legend"])  # only the kinds drawn
    # with each item's correctness: the estimates, and this pair is not noise-limited
    (row,) = measured["items"][1].to_dict("records")
    cells, texts = _heatmap(monkeypatch, measured["items"][1], tmp_path / "items.png")
    assert row["verdict"] != "noise-limited" and "∿" not in cells[("all runs", "ood1", "ood0")]
    assert texts["x"] == [f"ood0 ({row['reliability_x']:.2f})"] and texts["y"] == [f"ood1 ({row['reliability_y']:.2f})"]
    assert not any("noise-limited" in t for t in texts["legend"])
    # nothing known of the noise: the names alone, and the answer says it is about the scores observed
    cells, texts = _heatmap(monkeypatch, measured["unknown"][1], tmp_path / "unknown.png")
    assert texts["x"] == ["ood0"] and texts["y"] == ["ood1"]
    assert "the answer is about the observed scores (item noise unknown)" in texts["title"]
    assert not any("beside a name" in t for t in texts["legend"])


def test_the_forest_plot_shows_the_tasks_correlations_beside_the_observed(measured, tmp_path):
    pc, agree, opts = measured["items"]
    (row,) = agree.to_dict("records")
    drawn = draw(
        "forest",
        str(tmp_path / "f.png"),
        opts,
        dict(agree=agree, pc=pc),
        in_domain="in-domain",
        pair=("ood0", "ood1"),
        method="pearson",
        residualiser="linear",
    )
    (panel,) = drawn.values()
    pooled = pc[pc["run"] == "pooled"].set_index("model")
    assert (
        panel["corrected"]
        == {
            m: f"{r:+.2f}" if not np.isfinite(lo) else _interval(r, lo, hi)
            for m, r, lo, hi in zip(
                pooled.index, pooled["r_corrected"], pooled["ci_low_corrected"], pooled["ci_high_corrected"]
            )
        }
        and len(panel["corrected"]) == 6
    )
    corrected = [row[c] for c in ("r_consensus_corrected", "ci_low_consensus_corrected", "ci_high_consensus_corrected")]
    assert np.isfinite(corrected).all() and panel["tasks"] == _interval(*corrected)
    # the consensus the verdict read (the in-domain set's noise out), beside the observed one
    assert panel["read"] == _interval(row["r_consensus_eiv"], row["ci_low_consensus_eiv"], row["ci_high_consensus_eiv"])
    assert panel["consensus"] == _interval(row["r_consensus"], row["ci_low_consensus"], row["ci_high_consensus"])
    assert panel["reliability"] == (
        f"reliability ood0 {row['reliability_x']:.2f}, ood1 {row['reliability_y']:.2f}, "
        f"in-domain in-domain {row['reliability_in_domain']:.2f}"
    )
    assert panel["about"] == "about the tasks"
    # only sizes known: no estimate of the tasks' consensus, the range the bound allows; the verdict names
    # the testset that leaves the pair noise-limited
    pc, agree, _ = measured["bound"]
    (row,) = agree.to_dict("records")
    (panel,) = across_models.forest(
        agree, pc, str(tmp_path / "b.png"), "in-domain", "ood0", "ood1", "pearson", "linear"
    ).values()
    assert panel["tasks"] == _interval(np.nan, row["ci_low_consensus_corrected"], row["ci_high_consensus_corrected"])
    assert panel["verdict"] == f"noise-limited by {row['noise_limited']}"
    # nothing known: no consensus read but the observed one, and the tasks' row says why it is empty
    pc, agree, _ = measured["unknown"]
    (panel,) = across_models.forest(
        agree, pc, str(tmp_path / "u.png"), "in-domain", "ood0", "ood1", "pearson", "linear"
    ).values()
    assert "read" not in panel and panel["corrected"] == {}
    assert panel["tasks"] == "n/a: observed scores (item noise unknown)" and panel["reliability"] == ""


def test_a_drawing_process_is_given_the_columns_the_answers_figures_read(measured, tmp_path):
    """oodcorr analyse draws in processes that hold only the figures' columns: the same figures."""
    pc, agree, opts = measured["items"]
    args = {"in_domain": "in-domain", "pair": ("ood0", "ood1"), "method": "pearson", "residualiser": "linear"}
    here = draw("forest", str(tmp_path / "here.png"), opts, dict(agree=agree, pc=pc), **args)
    figures = [
        analysis_set.Figure("forest", str(tmp_path / "pool.png"), args, ("agree", "pc")),
        analysis_set.Figure(
            "consensus_heatmap",
            str(tmp_path / "c.png"),
            {k: args[k] for k in ("in_domain", "method", "residualiser")},
            ("agree",),
        ),
    ]
    there, cells = analysis_set.FigurePool(figures, 1, agree=agree, pc=pc, opts=opts).wait()
    assert there == here and np.isfinite(float(agree["r_consensus_corrected"].iloc[0]))
    assert cells == across_models.consensus_heatmap(
        agree, str(tmp_path / "c2.png"), "pearson", "linear", "in-domain", 0.05, 0.3
    )
