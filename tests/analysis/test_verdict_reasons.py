"""Verdicts' reasons and ways on (agreement.csv's ``reason`` and ``way_on``, oodcorr.core.answer) beyond
test_consensus.py's one table per verdict: two models each significant, one model of two runs, item noise,
the form, the answer's line, and reliabilities outside [0, 1]."""

import math

import numpy as np
import pandas as pd
import pytest
from test_consensus import _runs, _verdict, _why

from oodcorr.analysis import agreement
from oodcorr.core import answer
from oodcorr.core.answer import DEPENDS_ON_FORM, NOISE_EXCEEDS, reason_counts, reliability_text, tallies


def test_unresolved_with_two_models_each_significant():
    # the default's planted pair: two models, each run significant and negative, too few to say more
    table = _runs({"a": [-0.7], "b": [-0.6]}, se=0.3)
    table.loc[table["run"] == "pooled", "significant"] = True
    two = _verdict(table)
    assert two["verdict"] == "unresolved"
    reason, way = _why(two)
    assert reason.startswith(f"{answer.TWO_MODELS}: a statement about a further model needs 3 or more")
    assert reason.endswith("yet each model's own run finds it significant and negative")
    assert way.startswith("a third model (the runs already agree on the sign)")


def test_one_model_of_two_runs_says_why_its_cells_have_no_interval_and_what_gives_one():
    from oodcorr.analysis.across.pooling import pool_runs

    runs = _runs({"a": [-0.6, -0.62]})
    runs = runs[runs["run"] != "pooled"].assign(ci_low=-0.7, ci_high=-0.5, n=30, n_units=30, note="", p_method="t")
    pooled = pool_runs(runs)
    assert math.isnan(pooled["ci_low"].iloc[0])  # 2 runs: no pooled interval by default
    row = agreement(pd.concat([runs, pooled], ignore_index=True), 0.05, "holm").iloc[0]
    assert row["verdict"] == "fewer than 2 models tested"
    reason, way = _why(row)
    assert reason.startswith(f"{answer.ONE_MODEL}: a consensus across models needs 2 or more")
    assert "only 2 runs per model: no pooled interval" in reason
    assert "--pool-two-runs fixed-effect" in way and "a second model" in way
    fixed = pool_runs(runs, two_runs="fixed-effect")
    row = agreement(pd.concat([runs, fixed], ignore_index=True), 0.05, "holm").iloc[0]
    assert "--pool-two-runs" not in _why(row)[1]


@pytest.mark.parametrize(
    ("rel", "said"),
    [
        (0.2, "wnli's item noise is 80% of its series' variance (reliability below 0.5)"),
        (-41.74, f"wnli's {NOISE_EXCEEDS} (reliability below 0.5)"),
    ],
)
def test_noise_limited_names_the_testset_and_its_share_of_noise(rel, said):
    row = {
        "verdict": "noise-limited",
        "x": "wnli",
        "y": "rte",
        "in_domain": "mnli",
        "reliability_x": rel,
        "reliability_y": 0.9,
        "reliability_in_domain": 0.95,
        "ci_low_consensus": -0.93,
        "ci_high_consensus": -0.41,
        "n_models_consensus": 2,
    }
    reason, way = answer.verdict_reason(row, 0.05, 0.5)
    assert reason == (
        f"{answer.ITEM_NOISE}: {said}; the consensus interval [-0.93, -0.41] may be that noise persisting "
        "across checkpoints"
    )
    assert way == "more items for wnli (a larger testset)"
    assert "-41.74" not in reason


def test_a_bounded_reliability_says_its_bound_and_that_item_scores_give_an_estimate():
    row = {"verdict": "noise-limited", "x": "a", "y": "b", "in_domain": "d", "reliability_y_low": 0.3}
    reason, way = answer.verdict_reason(row, 0.05, 0.5)
    assert (
        reason
        == f"{answer.ITEM_NOISE}: b's item noise may be up to 70% of its series' variance (bounded by its size alone)"
    )
    assert way.startswith("more items for b") and "per-item scores" in way


def test_the_word_for_a_pair_that_depends_on_the_form_has_its_reason():
    row = {"verdict": "agree near zero", "n_models_consensus": 8, "n_models": 8, "n_finite": 8}
    plain, plain_way = answer.verdict_reason(row, 0.05, 0.5)
    reason, way = answer.verdict_reason({**row, "form": DEPENDS_ON_FORM, "line_verdict": "models differ"}, 0.05, 0.5)
    # the verdict's own reason first, then what the line answers instead
    assert reason == f"{plain}; {answer.FORM}: the straight line answers 'models differ' (the verdict is the curve's)"
    assert way.startswith(plain_way) and "scatter figure" in way and "checkpoints" in way


def test_a_reliability_outside_0_1_is_never_shown_as_a_share():
    assert reliability_text(-41.74, math.nan) == NOISE_EXCEEDS
    assert reliability_text(-0.01, math.nan) == NOISE_EXCEEDS
    assert "1.5" not in reliability_text(1.5, math.nan) and reliability_text(0.42, math.nan) == "0.42"


def test_the_answers_line_counts_the_pairs_by_reason():
    rows = [
        {
            "in_domain": "d",
            "method": "pearson",
            "residualiser": "linear",
            "pool_group": "all runs",
            "x": "a",
            "y": str(i),
        }
        | {"verdict": "unresolved", "n_models": 2, "n_models_consensus": 2, "reason": f"{answer.TWO_MODELS}: ... {i}"}
        for i in range(3)
    ]
    rows.append(rows[0] | {"verdict": "noise-limited", "y": "z", "reason": f"{answer.ITEM_NOISE}: z's item noise"})
    assert reason_counts(rows) == "why: 2 models (3 pairs), item noise (1 pair)"
    (line,) = tallies(rows, "pearson", "linear")
    assert line[2].endswith("; why: 2 models (3 pairs), item noise (1 pair)")
    assert reason_counts([{"verdict": "unresolved"}]) == ""


def test_every_kind_is_said_once_and_every_reason_starts_with_its_kind():
    assert len(set(answer.KINDS)) == len(answer.KINDS)
    spec = [
        _runs({f"m{i}": [-0.5 + 0.02 * i, -0.48 - 0.01 * i] for i in range(6)}, pair=("a", "b")),
        _runs({"a": [0.6, 0.62], "b": [0.58, 0.6], "c": [-0.6, -0.61], "d": [-0.59, -0.6]}, pair=("a", "c")),
        _runs({"a": [0.1], "b": [-0.05], "c": [0.15]}, pair=("b", "c"), se=0.3),
    ]
    ag = agreement(pd.concat(spec, ignore_index=True), 0.05, "holm")
    assert list(ag.columns[-2:]) == ["reason", "way_on"]
    assert all(r.split(": ", 1)[0] in answer.KINDS for r in ag["reason"])


def test_the_consoles_reliability_line_and_a_figures_label_never_show_a_share_below_0():
    from oodcorr.core.answer import reliability_line
    from oodcorr.jobs.figures.across_models import short_reliability

    rows = [
        {"x": "ood1", "y": "ood2", "in_domain": "d", "reliability_x": -12.70, "reliability_y": -41.74}
        | {"reliability_in_domain": 0.9}
    ]
    line = reliability_line(rows, 0.5)
    assert f"ood2 {NOISE_EXCEEDS}" in line and f"ood1 {NOISE_EXCEEDS}" in line and "d (in-domain) 0.90" in line
    assert "-41.74" not in line and "-12.70" not in line
    assert short_reliability(-41.74, math.nan) == "noise>var" and short_reliability(0.35, math.nan) == "0.35"


def test_the_noise_limited_column_says_a_negative_reliability_in_words():
    from oodcorr.analysis.across.measured_answer import noise_limited

    rel = {f"reliability_{s}": np.array([v]) for s, v in (("x", -41.74), ("y", 0.9), ("in_domain", 0.95))}
    rel |= {f"reliability_{s}_low": np.array([np.nan]) for s in ("x", "y", "in_domain")}
    assert noise_limited("ood2", "ood1", "d", rel, 0) == f"ood2 (reliability {NOISE_EXCEEDS})"


def test_an_interval_that_excludes_0_before_the_correction_across_pairs_says_so():
    row = {"verdict": "unresolved", "n_models": 2, "n_models_consensus": 2, "family_size": 10}
    row |= {"ci_low_consensus": -0.97, "ci_high_consensus": -0.11, "p_mean_adj": 0.12}
    reason, way = answer.verdict_reason(row, 0.05, 0.5)
    assert reason == (
        f"{answer.TWO_MODELS}: a statement about a further model needs 3 or more, and the consensus interval "
        "[-0.97, -0.11] excludes 0 only before the correction across the table's 10 pairs (p 0.12 after correction)"
    )
    assert way == "a third model; or more runs per model"
    three = answer.verdict_reason(row | {"n_models_consensus": 3}, 0.05, 0.5)[0]
    assert three.startswith(f"{answer.CORRECTED}: across 3 models the consensus interval [-0.97, -0.11] excludes 0")
