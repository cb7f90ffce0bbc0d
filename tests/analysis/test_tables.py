"""Scores against the range of their metric (oodcorr.analysis.readers.tables): an accuracy of -0.2 or 1.7
in a table `oodcorr analyse` reads, or in the workflow's own scores table, is refused naming the
line (or row) and the value; a table in percent is read as one, and a metric without a known
range is only checked to be a number."""

from __future__ import annotations

import pandas as pd
import pytest

from oodcorr.analysis.readers.tables import Layout, from_long, from_wide, read_table
from oodcorr.analysis.readers.workflow_scores import from_scores
from oodcorr.core.errors import DataError


def long_csv(tmp_path, scores: dict[str, list[float]], column: str = "accuracy"):
    """A long table (step, testset, ``column``) of the scores of each testset over steps 0, 1, ..."""
    rows = [(s, t, v) for t, vs in scores.items() for s, v in enumerate(vs)]
    p = tmp_path / "long.csv"
    p.write_text(f"step,testset,{column}\n" + "".join(f"{s},{t},{v}\n" for s, t, v in rows))
    return p


def read_long(path, column="accuracy"):
    df, where = read_table(path)
    return from_long(
        df, Layout(unit="step", in_domain="ind", source=str(path), where=where), testset="testset", score=column
    )


SHARES = {"ind": [0.5, 0.6, 0.7, 0.8], "x": [0.3, 0.35, 0.4, 0.45], "y": [0.6, 0.62, 0.61, 0.66]}


@pytest.mark.parametrize("value", [-0.2, 1.7])
def test_an_accuracy_out_of_range_in_a_long_table_is_refused_naming_line_and_value(tmp_path, value):
    scores = {k: list(v) for k, v in SHARES.items()}
    scores["x"][2] = value  # line 1 + 4 (ind) + 3 = line 8
    p = long_csv(tmp_path, scores)
    with pytest.raises(DataError) as e:
        read_long(p)
    msg = str(e.value)
    assert str(p) in msg and "line 8" in msg and f"score {value:g}" in msg and "[0, 1]" in msg, msg
    assert "shares: their median is" in msg  # why [0, 1]: the scale the other scores are on


def test_a_table_in_percent_is_read_and_its_own_range_checked(tmp_path):
    percent = {k: [100 * x for x in v] for k, v in SHARES.items()}
    assert read_long(long_csv(tmp_path, percent))["score"].max() == pytest.approx(80.0)
    percent["y"][1] = 170.0
    with pytest.raises(DataError, match=r"column 'accuracy', line 11: score 170 is outside \[0, 100\].*percentages"):
        read_long(long_csv(tmp_path, percent))


def test_a_metric_without_a_known_range_is_only_checked_to_be_a_number(tmp_path):
    loglik = {k: [-3.0 - x for x in v] for k, v in SHARES.items()}
    got = read_long(long_csv(tmp_path, loglik, column="loglik"), column="loglik")
    assert got["score"].min() == pytest.approx(-3.8)
    # and a correlation may be negative, but not below -1
    mcc = {k: [x - 0.5 for x in v] for k, v in SHARES.items()}
    assert read_long(long_csv(tmp_path, mcc, column="mcc"), column="mcc")["score"].min() == pytest.approx(-0.2)
    mcc["x"][0] = -1.5
    with pytest.raises(DataError, match=r"score -1.5 is outside \[-1, 1\], the range of 'mcc'"):
        read_long(long_csv(tmp_path, mcc, column="mcc"), column="mcc")


def test_a_wide_tables_scores_are_accuracies(tmp_path):
    p = tmp_path / "wide.csv"
    p.write_text("Run,ind,x,y\nr0,0.8,0.4,0.5\nr1,0.82,1.7,0.52\nr2,0.81,0.45,0.49\nMean,0.81,0.85,0.50\n")
    df, where = read_table(p)
    with pytest.raises(DataError) as e:
        from_wide(df, Layout(unit="Run", in_domain="ind", source=str(p), where=where))
    msg = str(e.value)
    assert "column 'x', line 3: score 1.7 is outside [0, 1]" in msg and "--metric 'COLUMN=METRIC'" in msg, msg


# a wide table whose columns are on different scales (issue 47): ind and x in shares, y in percent, ll a
# log-likelihood (negative)
MIXED = "step,ind,x,y,ll\n0,0.50,0.30,60.0,-3.1\n1,0.60,0.35,62.0,-2.9\n2,0.70,0.40,61.0,-2.7\n3,0.80,0.45,66.0,-2.6\n"


def test_a_wide_table_of_mixed_scales_is_read_column_by_column_and_names_the_flag_that_reads_the_rest(tmp_path):
    """Before: refused as a whole, the scale told by the median of every column together (issue 47, 54)."""
    p = tmp_path / "wide.csv"
    p.write_text(MIXED)
    df, where = read_table(p)
    with pytest.raises(DataError) as e:
        from_wide(df, Layout(unit="step", in_domain="ind", source=str(p), where=where))
    msg = str(e.value)  # y, in percent, is read as such; ll, a log-likelihood named nothing, is refused
    assert "column 'll', line 2: score -3.1 is outside [0, 1]" in msg and "--metric 'COLUMN=METRIC'" in msg, msg
    assert "'y'" not in msg


def test_a_wide_table_says_how_to_read_each_column(tmp_path):
    p = tmp_path / "wide.csv"
    p.write_text(MIXED)
    df, where = read_table(p)
    read = Layout(unit="step", in_domain="ind", source=str(p), where=where)
    got = from_wide(df, read, metrics={"ll": "loglik"})
    top = got.groupby("testset")["score"].max().to_dict()
    assert top == pytest.approx({"ind": 0.8, "x": 0.45, "y": 66, "ll": -2.6})
    # each column's own range is still checked: a typo among shares, a percentage over 100, a loglik is anything;
    # both bad columns in one message
    bad = df.copy()
    bad.loc[bad.index[2], "x"] = "1.7"  # as read: text
    bad.loc[bad.index[1], "y"] = "170"
    with pytest.raises(DataError) as e:
        from_wide(bad, read, metrics={"ll": "loglik"})
    msg = str(e.value)
    assert msg.startswith(f"{p}: 2 columns hold a score outside their metric's range"), msg
    assert (
        "column 'x', line 4: score 1.7 is outside [0, 1]" in msg
        and "column 'y', line 3: score 170 is outside [0, 100]" in msg
    )
    with pytest.raises(
        DataError, match=r"column 'll', line 2: score -3.1 is outside \[0, inf\], the range of 'perplexity'"
    ):
        from_wide(df, read, metrics={"ll": "perplexity"})
    with pytest.raises(DataError, match=r"--metric COLUMN=METRIC: nothing is named 'nope'"):
        from_wide(df, read, metrics={"nope": "loglik"})
    assert len(from_wide(df, read, metrics={"l*": "loglik", "y": "accuracy"})) == 16  # a glob names ll


def test_the_workflows_scores_are_shares_whatever_their_median(tmp_path):
    scores = pd.DataFrame(
        {
            "model": "m",
            "run_id": "r",
            "step": [0, 0, 1, 1],
            "testset": ["ind", "x", "ind", "x"],
            "role": ["in-domain", "ood", "in-domain", "ood"],
            "accuracy": [0.5, 0.4, 0.6, 0.45],
        }
    )
    long, _ = from_scores(scores)
    assert list(long["score"]) == [0.5, 0.4, 0.6, 0.45]
    scores.loc[3, "accuracy"] = 1.7
    with pytest.raises(DataError, match=r"run r, step 1, testset 'x': accuracy 1.7 is outside \[0, 1\]"):
        from_scores(scores)
    with pytest.raises(DataError, match=r"testset 'ind': ece 50 is outside \[0, 1\]"):
        from_scores(scores.assign(ece=[50.0, 40.0, 60.0, 45.0]), "ece")


def test_metric_ranges_by_name():
    from oodcorr.analysis.readers.score_ranges import metric_range

    assert metric_range("acc,none") == (0.0, 1.0) and metric_range("ACC_NORM") == (0.0, 1.0)
    assert metric_range("mcc") == (-1.0, 1.0)
    assert metric_range("word_perplexity,none")[1] == float("inf")
    assert metric_range("loglik") is None


def test_an_unknown_in_domain_testset_gets_the_closest_names_and_only_testsets_as_candidates():
    """A wide table's unknown in-domain column listed the unit column among the testsets and had no
    'did you mean' (the config check has one); a long table's had none either."""
    wide = pd.DataFrame({"step": [0, 1, 2], "mnli": [0.5, 0.6, 0.7], "hans": [0.5, 0.5, 0.6], "anli": [0.3, 0.4, 0.4]})
    with pytest.raises(DataError) as e:
        from_wide(wide, Layout(unit="step", in_domain="mnil", source="t.csv"))
    assert str(e.value) == (
        "t.csv: the in-domain testset 'mnil' is not a column; did you mean 'mnli'?; the testset columns are "
        "['mnli', 'hans', 'anli']"
    )
    long = wide.melt(id_vars="step", var_name="testset", value_name="accuracy")
    with pytest.raises(DataError, match=r"does not occur in column 'testset'; did you mean 'mnli'\?; testsets are"):
        from_long(long, Layout(unit="step", in_domain="mnil", source="t.csv"), testset="testset", score="accuracy")
