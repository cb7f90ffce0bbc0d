"""The answer in one sentence per in-domain set (oodcorr.core.answer): the console's last lines and the
report's landing text count the pairs per verdict of agreement.csv."""

from __future__ import annotations

from oodcorr.analysis.consensus import VERDICTS
from oodcorr.core.answer import answer_lines, states_a_sign, tallies, verdict_order


def _rows(verdicts, n_models, dom="mnli", method="pearson", res="linear"):
    return [
        {
            "in_domain": dom,
            "pool_group": "all runs",
            "x": f"a{i}",
            "y": f"b{i}",
            "method": method,
            "residualiser": res,
            "verdict": v,
            "n_models_consensus": str(n_models),
            "n_models": str(n_models),
        }
        for i, v in enumerate(verdicts)
    ]


def test_the_ladder_order_is_the_analysis_one():
    assert sorted(VERDICTS, key=verdict_order) == list(VERDICTS)
    signed = [v for v in VERDICTS if states_a_sign(v)]
    assert len(signed) == 12 and all(("positive" in v) != ("negative" in v) for v in signed)
    assert not any(states_a_sign(v) for v in ("sign reversal", "models differ", "agree near zero", "unresolved"))


def test_two_models_say_no_further_model_can_be_predicted():
    (line,) = tallies(_rows(["unresolved"] * 10, 2), "pearson", "linear")
    assert line[2] == (
        "in-domain mnli: 10 pairs, a sign for 0: 10 unresolved (2 models: no further model can be predicted, so "
        "nothing is said of nearly every model; that needs 3 or more)"
    )


def test_the_counts_of_each_verdict_and_the_files_named():
    rows = _rows(
        [
            "positive on average",
            "negative in nearly every model",
            "positive on average",
            "sign reversal, negative on average",
            "models differ",
            "negative on average, models differ",
        ],
        6,
    )
    rows += _rows(["unresolved"], 6, method="spearman")  # another method: not counted
    lines = answer_lines(rows, "pearson", "linear", "results/x/analysis", consensus_sets=["mnli"])
    assert lines == [
        "the answer, results/x/analysis/agreement.csv (pearson, linear): in-domain mnli: 6 pairs, a sign for 5: "
        "1 sign reversal, negative on average; 1 negative in nearly every model; 2 positive on average; "
        "1 negative on average, models differ; 1 models differ (6 models); consensus heatmap "
        "results/x/analysis/consensus/mnli.png, forest plots (why each pair) in results/x/analysis/forest/mnli/"
    ]


def test_one_model_has_no_consensus_and_no_heatmap_named():
    lines = answer_lines(_rows(["fewer than 2 models tested"] * 3, 1), "pearson", "linear", "out")
    assert lines == [
        "the answer, out/agreement.csv (pearson, linear): in-domain mnli: 3 pairs, a sign for 0: "
        "3 fewer than 2 models tested (1 model: no consensus across models, which needs 2 or more); "
        "no consensus heatmap"
    ]


def test_the_answer_line_docs_analysis_shows_is_the_one_written():
    """docs/analysis.md quotes `oodcorr analyse`'s answer line; it was in words the answer no longer
    says ('5 generalise (3 positive, 2 negative), 0 reverse'). The quote is the line these counts give."""
    import re

    from helpers import REPO

    verdicts = (
        ["negative in nearly every model"]
        + ["positive on average"] * 4
        + ["negative on average"] * 2
        + ["positive on average, models differ"]
        + ["models differ"] * 6
        + ["agree near zero"]
        + ["unresolved"] * 6
    )
    line = answer_lines(_rows(verdicts, 16), "pearson", "linear", "my-analysis", consensus_sets=["mnli"])[0]
    doc = re.sub(r"\s+", " ", (REPO / "docs/analysis.md").read_text())
    assert f"(`{line}`)" in doc
