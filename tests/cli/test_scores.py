"""Reading a scores table for `oodcorr analyse` (oodcorr.cli.scores): a misnamed file, text units and
infinite scores are said, not silently read or dropped."""

from __future__ import annotations

import logging

import numpy as np
import pandas as pd
import pytest

from oodcorr.cli import main
from oodcorr.cli.scores import parse_groups
from oodcorr.core.errors import DataError

WIDE = ["--format", "wide", "--unit", "unit", "--in-domain", "mnli"]


def test_a_tab_separated_scores_table_named_csv_is_named_as_such(tmp_path, caplog):
    path = tmp_path / "scores.csv"
    path.write_text("step\ttestset\taccuracy\n0\tmnli\t0.5\n")
    with caplog.at_level(logging.ERROR):
        assert main(["analyse", str(path), "--in-domain", "mnli", "--out", str(tmp_path / "o")]) == 2
    assert (
        f"{path}:1: the header holds tabs and no comma, so the file looks tab-separated, but its name says "
        "otherwise; name it .tsv (compressed: .tsv.gz)"
    ) in caplog.text


def test_a_model_column_the_table_lacks_is_named_not_a_traceback(tmp_path, caplog):
    path = tmp_path / "scores.csv"
    path.write_text("step,testset,accuracy\n0,mnli,0.5\n")
    with caplog.at_level(logging.ERROR):
        assert (
            main(["analyse", str(path), "--in-domain", "mnli", "--model", "nosuch", "--out", str(tmp_path / "o")]) == 2
        )
    assert f"{path}: no column 'nosuch'; columns are ['step', 'testset', 'accuracy']" in caplog.text


def _wide_rows(units, extra=None):
    rows = ["unit,mnli,a,b,c"]
    for i, u in enumerate(units):
        rows.append(f"{u},{0.5 + 0.01 * i},{0.4 + 0.02 * i},{0.3 + 0.015 * (i % 3)},{0.6 - 0.01 * i}")
    if extra:
        rows[extra[0]] = extra[1]
    return "\n".join(rows) + "\n"


def _analyse_wide(path, out):
    return main(["analyse", str(path), *WIDE, "--no-plots", "--out", str(out)])


def test_text_units_are_said_to_be_exchangeable(tmp_path, caplog):

    path = tmp_path / "runs.csv"
    path.write_text(_wide_rows([f"seed-{i}" for i in range(10)]))
    with caplog.at_level(logging.INFO):
        rc = _analyse_wide(path, tmp_path / "o")
    assert rc == 0
    assert (
        f"{path}: the units in column 'unit' are not numbers ('seed-0', 'seed-1', 'seed-2', ...), so they are "
        "treated as exchangeable: in no order, with no autocorrelation between them allowed for, and no learning "
        "curves; give a numeric --unit (a training step) for ordered units"
    ) in caplog.text
    caplog.clear()
    path.write_text(_wide_rows(range(0, 100, 10)))
    with caplog.at_level(logging.INFO):
        _analyse_wide(path, tmp_path / "p")
    assert "treated as exchangeable" not in caplog.text  # numeric units are ordered: nothing to say


def test_an_infinite_score_is_said_not_dropped_silently(tmp_path, caplog):

    path = tmp_path / "scores.csv"
    path.write_text(_wide_rows(range(0, 100, 10), extra=(4, "30,0.53,inf,0.3,0.57")))
    with caplog.at_level(logging.WARNING):
        rc = _analyse_wide(path, tmp_path / "o")
    assert rc == 0
    assert (
        f"{path}: column 'a' holds 1 infinite score(s) (line 5); each is left out, as a missing score, of every "
        "cell that uses it: fix the table if they stand for real values"
    ) in caplog.text


def test_items_bound_each_testsets_noise_and_bad_sizes_name_the_flag(tmp_path, caplog):
    rng = np.random.default_rng(0)
    z = np.linspace(0.55, 0.8, 15) + rng.normal(0, 0.01, 15)
    table = pd.DataFrame({"unit": range(0, 150, 10), "mnli": z})
    for name, k in (("a", 0.6), ("b", 0.5), ("c", 0.4)):
        table[name] = 0.3 + k * z + rng.normal(0, 0.02, 15)
    path = tmp_path / "wide.csv"
    table.to_csv(path, index=False)
    out = tmp_path / "o"
    assert main(["analyse", str(path), *WIDE, "--items", "2000", "a=71", "--out", str(out), "--no-plots"]) == 0
    pc = pd.read_csv(out / "partial_correlations.csv")
    cell = pc[(pc["x"] == "a") & (pc["y"] == "b") & (pc["run"] != "pooled")].iloc[0]
    assert cell["eiv_from"] == "bound" and "bounded by testset size (binomial)" in cell["noise"]
    # a's 71 items bound more of its series' variance than b's 2,000 do of b's
    assert cell["reliability_x_low"] < cell["reliability_y_low"] <= 1
    agree = pd.read_csv(out / "agreement.csv")
    assert (agree["about"] == "tasks (in-domain noise bounded by its size)").all()
    for words, said in (
        (["--items", "a=seventy"], "--items 'a=seventy': give N or TESTSET=N"),
        (["--items", "zz=10"], "--items names ['zz'], which are no testsets of the table"),
        (["--items", "a=7.5"], "--items a=7.5: the items behind a score are a whole number of 1 or more"),
        (["--n-column", "n"], "--n-column: a wide table has no column of sizes; give them with --items"),
    ):
        caplog.clear()
        with caplog.at_level(logging.ERROR):
            rc = main(["analyse", str(path), *WIDE, *words, "--out", str(tmp_path / "bad")])
        assert rc == 2 and said in caplog.text, caplog.text
    assert not (tmp_path / "bad").exists()  # refused before anything is written


def test_an_n_column_of_a_long_table_is_read_and_checked(tmp_path, caplog):
    rows = ["step,testset,accuracy,n"]
    for i in range(12):
        for ts, base in (("mnli", 0.5), ("a", 0.4), ("b", 0.3)):
            rows.append(f"{i * 10},{ts},{base + 0.01 * i + 0.003 * (i % 3)},{300 if ts != 'a' else 100}")
    path = tmp_path / "long.csv"
    path.write_text("\n".join(rows) + "\n")
    assert main(["analyse", str(path), "--in-domain", "mnli", "--n-column", "n", "--out", str(tmp_path / "o"),
                 "--no-plots"]) == 0  # fmt: skip
    pc = pd.read_csv(tmp_path / "o" / "partial_correlations.csv")
    assert set(pc.loc[pc["run"] != "pooled", "eiv_from"]) == {"bound"}
    path.write_text("\n".join(rows[:5] + [rows[5].rsplit(",", 1)[0] + ",12.5"] + rows[6:]) + "\n")
    with caplog.at_level(logging.ERROR):
        assert main(["analyse", str(path), "--in-domain", "mnli", "--n-column", "n",
                     "--out", str(tmp_path / "p")]) == 2  # fmt: skip
    assert "line 6: n '12.5' is not a whole number of items (1 or more)" in caplog.text


def test_group_names_a_testset_made_of_others_and_its_pairs_are_left_out(tmp_path, caplog):
    """``--group`` for a table (no group_subtasks to read): the group's pairs with its own testsets are
    left out, saying so, the others analysed; a word not of the form GROUP=TESTSET,... is refused."""
    rng = np.random.default_rng(0)
    path = tmp_path / "runs.csv"
    z = 0.5 + 0.01 * np.arange(12)
    cols = {"unit": np.arange(12) * 10, "mnli": z, **{t: 0.5 * z + rng.normal(0, 0.01, 12) for t in "abc"}}
    pd.DataFrame(cols).to_csv(path, index=False)
    common = ["analyse", str(path), *WIDE, "--no-plots"]
    assert main([*common, "--group", "c=a,b", "--out", str(tmp_path / "o")]) == 0
    pc = pd.read_csv(tmp_path / "o" / "partial_correlations.csv", keep_default_na=False, na_values=[""])
    left = pc["y"] == "c"
    assert set(pc.loc[left, "x"]) == {"a", "b"} and pc.loc[left, "r"].isna().all()
    assert (
        pc.loc[left & (pc["run"] != "pooled"), "note"].str.match(r"(a|b) and c share items \(c includes (a|b)\)").all()
    )
    assert pc.loc[~left, "r"].notna().all()
    assert parse_groups(["c=a,b", "c=d", "e=f"], {"g": ["h"]}) == {"g": ["h"], "c": ["a", "b", "d"], "e": ["f"]}
    for bad in ("c", "=a", "c=", "c=c,a"):
        with pytest.raises(DataError, match=r"--group '.*': give GROUP=TESTSET,TESTSET"):
            parse_groups([bad])
    with caplog.at_level(logging.ERROR):
        assert main([*common, "--group", "c:a", "--out", str(tmp_path / "p")]) == 2
    assert "--group 'c:a': give GROUP=TESTSET,TESTSET,..." in caplog.text and not (tmp_path / "p").exists()
