"""The answer in one sentence per in-domain set (oodcorr.core.answer): the console's last lines and the
report's landing text count the pairs per verdict of agreement.csv."""

from __future__ import annotations

from oodcorr.analysis.consensus import VERDICTS
from oodcorr.core.answer import WORDS, answer_lines, tallies


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


def test_every_verdict_has_its_word():
    assert set(WORDS) == set(VERDICTS)


def test_two_models_say_no_further_model_can_be_predicted():
    (line,) = tallies(_rows(["unresolved"] * 10, 2), "pearson", "linear")
    assert line[2] == (
        "in-domain mnli: 10 pairs: 0 generalise, 0 reverse, 10 unresolved (2 models: no further model can be "
        "predicted; a verdict of generalises needs 3 or more)"
    )


def test_the_counts_of_each_verdict_and_the_files_named():
    rows = _rows(
        [
            "generalises (positive)",
            "generalises (negative)",
            "generalises (positive)",
            "sign reversal",
            "models differ",
        ],
        6,
    )
    rows += _rows(["unresolved"], 6, method="spearman")  # another method: not counted
    lines = answer_lines(rows, "pearson", "linear", "results/x/analysis", consensus_sets=["mnli"])
    assert lines == [
        "the answer, results/x/analysis/agreement.csv (pearson, linear): in-domain mnli: 5 pairs: 3 generalise "
        "(2 positive, 1 negative), 1 reverse, 0 unresolved, 1 differ (6 models); consensus heatmap "
        "results/x/analysis/consensus/mnli.png, forest plots (why each pair) in results/x/analysis/forest/mnli/"
    ]


def test_one_model_has_no_consensus_and_no_heatmap_named():
    lines = answer_lines(_rows(["fewer than 2 models tested"] * 3, 1), "pearson", "linear", "out")
    assert lines == [
        "the answer, out/agreement.csv (pearson, linear): in-domain mnli: 3 pairs: 0 generalise, 0 reverse, "
        "0 unresolved, 3 with fewer than 2 models (1 model: no consensus across models, which needs 2 or more); "
        "no consensus heatmap"
    ]
