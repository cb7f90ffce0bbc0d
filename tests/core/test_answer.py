"""The answer in one sentence per in-domain set and the ladder's words (oodcorr.core.answer): the
console's last lines and the report's landing text count the pairs per verdict of agreement.csv."""

from __future__ import annotations

import math

import pytest

from oodcorr.core.answer import (
    VERDICTS,
    about,
    answer_lines,
    reliabilities,
    reliability_line,
    states_a_sign,
    tallies,
    verdict_rank,
    verdict_words,
)


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


def test_every_verdict_is_the_two_facts_in_words_strongest_first():
    directions = [f"{s} {r}" for r in ("in nearly every model", "on average") for s in ("positive", "negative")]
    composed = {
        verdict_words(d, sp) for d in ["", *directions] for sp in ("", "sign reversal", "models differ", "near zero")
    }
    # a reversal is said with the average sign only; the sign in nearly every model is not near zero
    composed -= {verdict_words(d, "sign reversal") for d in directions if "nearly" in d}
    composed -= {verdict_words(d, "near zero") for d in directions if "nearly" in d}
    # and the three that say why there is no answer: item noise, too few models, no data
    assert set(VERDICTS) == composed | {"noise-limited", "fewer than 2 models tested", "no data"}
    assert len(VERDICTS) == 19 and VERDICTS[0] == "sign reversal" and VERDICTS[-1] == "no data"
    assert verdict_rank("negative in nearly every model") < verdict_rank("negative on average")
    assert verdict_rank("negative on average") < verdict_rank("models differ") < verdict_rank("unresolved")
    assert verdict_rank("a word from elsewhere") == len(VERDICTS)


def test_the_verdicts_that_state_a_sign():
    signed = [v for v in VERDICTS if states_a_sign(v)]
    assert len(signed) == 12 and all(("positive" in v) != ("negative" in v) for v in signed)
    assert not any(states_a_sign(v) for v in ("sign reversal", "models differ", "agree near zero", "unresolved"))


def test_two_models_say_no_further_model_can_be_predicted():
    (line,) = tallies(_rows(["unresolved"] * 10, 2), "pearson", "linear")
    assert line[2] == (
        "in-domain mnli: 10 pairs, a sign for 0: 10 unresolved (2 models: no further model can be predicted, so "
        "nothing is said of nearly every model; that needs 3 or more)"
    )


def _runs_found(verdict, x, y, n_models, sig_neg, sig_pos=0, r=""):
    row = _rows([verdict], n_models)[0]
    return dict(row, x=x, y=y, n_sig_negative=str(sig_neg), n_sig_positive=str(sig_pos), r_consensus=str(r))


def test_with_two_models_the_line_names_the_pairs_every_run_finds_with_one_sign():
    """The default's planted pair: unresolved across 2 models, significant and negative in both runs."""
    rows = [
        _runs_found("unresolved", "synth-no", "synth-yes", 2, 2, r=-0.995),
        _runs_found("unresolved", "a", "b", 2, 1, 1, r=0.1),  # the runs disagree: not named
        _runs_found("unresolved", "c", "d", 2, 1, r=-0.7),  # one run only: not named
        _runs_found("noise-limited", "e", "f", 2, 2, r=-0.9),  # item noise can fake a run's significance
        _runs_found("models differ", "g", "h", 2, 0, 2, r=0.3),  # the ladder said something: not repeated
        _runs_found("unresolved", "i", "j", 2, 0, 2, r=0.4),
    ]
    (line,) = tallies(rows, "pearson", "linear")
    assert line[2] == (
        "in-domain mnli: 6 pairs, a sign for 0: 1 models differ; 1 noise-limited; 4 unresolved (2 models: no further "
        "model can be predicted, so nothing is said of nearly every model; that needs 3 or more); significant with "
        "one sign in each of the 2 models' runs: synth-no × synth-yes negative, i × j positive"
    )


def test_one_model_names_what_its_run_finds_and_three_models_leave_it_to_the_ladder():
    one = [_runs_found("fewer than 2 models tested", f"a{i}", "b", 1, 1) for i in range(7)]
    (line,) = tallies(one, "pearson", "linear")
    assert line[2].endswith(
        "(1 model: no consensus across models, which needs 2 or more); significant with one sign in the model's "
        "run: a0 × b negative, a1 × b negative, a2 × b negative, a3 × b negative, a4 × b negative and 2 more"
    )
    three = [_runs_found("unresolved", "a", "b", 3, 3, r=-0.9)]
    (line,) = tallies(three, "pearson", "linear")
    assert line[2] == "in-domain mnli: 1 pair, a sign for 0: 1 unresolved (3 models)"


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
    lines = answer_lines(_rows(["fewer than 2 models tested"] * 3, 1), "pearson", "linear", "out", [])
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


def _measured(verdict, x, y, about, limited="", rel=(0.8, 0.7, 0.9)):
    """An agreement row as read from agreement.csv (text), with the measured columns; ``rel``: the
    reliability of x, y and the in-domain set, each an estimate (its low end 0.1 below) or a pair
    (estimate, low end)."""
    (row,) = _rows([verdict], 12)
    row.update(x=x, y=y, about=about, noise_limited=limited)
    for side, v in zip(("x", "y", "in_domain"), rel):
        est, low = v if isinstance(v, tuple) else (v, v - 0.1)
        row[f"reliability_{side}"], row[f"reliability_{side}_low"] = str(est), str(low)
    return row


def test_noise_limited_pairs_are_counted_and_named_with_their_reliability():
    rows = [
        _measured("noise-limited", "anli", "wnli", "tasks", "wnli (reliability 0.23)", (0.57, 0.23, 0.96)),
        _measured(
            "noise-limited",
            "rte",
            "wnli",
            "tasks",
            "rte (reliability 0.35), wnli (reliability 0.23)",
            (0.35, 0.23, 0.96),
        ),
        _measured("noise-limited", "hans", "rte", "tasks", "rte (reliability 0.35)", (0.69, 0.35, 0.96)),
        _measured("positive on average", "anli", "hans", "tasks", rel=(0.57, 0.69, 0.96)),
        _measured("unresolved", "hans", "wnli", "tasks", rel=(0.69, 0.23, 0.96)),
    ]
    (line,) = tallies(rows, "pearson", "linear")
    assert line[2] == (
        "in-domain mnli: 5 pairs, a sign for 1: 1 positive on average; 3 noise-limited; 1 unresolved (12 models); "
        "about the tasks; noise-limited by rte (reliability 0.35, 2 pairs), wnli (reliability 0.23, 2 pairs)"
    )
    assert reliabilities(rows)["wnli"] == (0.23, pytest.approx(0.13)) and reliabilities(rows)["mnli"][0] == 0.96


def test_the_answer_says_when_it_speaks_of_the_observed_scores():
    unknown = "observed scores (item noise unknown)"
    rows = [_measured("unresolved", f"a{i}", "b", unknown, rel=(math.nan,) * 3) for i in range(3)]
    (line,) = tallies(rows, "pearson", "linear")
    assert line[2].endswith("3 unresolved (12 models); about the observed scores (item noise unknown)")
    rows[0]["about"] = "tasks"
    assert about(rows) == "about the tasks for 1 pair, the observed scores for 2 (item noise unknown)"


def test_a_bound_is_said_as_the_least_reliability_and_many_testsets_are_cut_short():
    # only sizes known: no estimate, the bound's low end; the in-domain set named by its own reason
    rows = [
        _measured(
            "noise-limited",
            f"mmlu_{i}",
            "arc",
            "tasks (in-domain noise bounded by its size)",
            f"mmlu_{i} (reliability at least 0.10: its size bounds the noise), mnli (its variation is within its item "
            "noise)",
            ((math.nan, 0.1), 0.9, 0.2),
        )
        for i in range(7)
    ]
    (line,) = tallies(rows, "pearson", "linear")
    assert line[2].endswith(
        "about the tasks (in-domain noise bounded by its size); noise-limited by mnli (reliability 0.20, 7 pairs), "
        "mmlu_0 (reliability at least 0.10, 1 pair), mmlu_1 (reliability at least 0.10, 1 pair), mmlu_2 "
        "(reliability at least 0.10, 1 pair), mmlu_3 (reliability at least 0.10, 1 pair) and 3 more testsets"
    )


def test_the_log_names_each_testsets_reliability_the_least_reliable_first():
    nan = float("nan")
    rows = [
        {
            "in_domain": "mnli",
            "x": "anli",
            "y": "wnli",
            "reliability_x": 0.6,
            "reliability_x_low": 0.5,
            "reliability_y": 0.2,
            "reliability_y_low": 0.1,
            "reliability_in_domain": 0.9,
            "reliability_in_domain_low": 0.8,
        },
        {
            "in_domain": "mnli",
            "x": "anli",
            "y": "rte",
            "reliability_x": 0.6,
            "reliability_x_low": 0.5,
            "reliability_y": nan,
            "reliability_y_low": 0.3,
            "reliability_in_domain": 0.9,
            "reliability_in_domain_low": 0.8,
        },
    ]
    assert reliability_line(rows, 0.5).endswith(": wnli 0.20, rte at least 0.30, anli 0.60, mnli (in-domain) 0.90")
    unknown = [{**r, **{k: nan for k in r if k.startswith("reliability")}} for r in rows]
    assert reliability_line(unknown, 0.5) == ""
