"""`oodcorr analyse` on a tracker's exports as they come (issue 54): several files in one call, each a
run; the unit column found; globs in --testsets, --exclude and --metric; each column's metric read from
its name; every bad column named in one message; settings.json that reruns the analysis (--from).

The fixture, tests/cli/data/wandb/, is three runs of one model as W&B's ``run.history().to_csv()``
writes them: an unnamed row-number column, ``_step``, ``_runtime``, ``_timestamp``, training metrics
every 20 steps and evaluations every 100 (empty cells between), names with slashes, a validation loss,
its perplexity and bpb beside task accuracies, and a soft log-probability below zero (made up, not a
real run's numbers)."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pandas as pd
import pytest

from oodcorr.analysis.readers.tables import find_unit, matching
from oodcorr.cli import build_parser, main
from oodcorr.cli.scores import metric_flag
from oodcorr.core.errors import DataError

WANDB = Path(__file__).parent / "data" / "wandb"
LOSS = "eval/c4_en-validation/CrossEntropyLoss"
FAST = ["--methods", "pearson", "--residualisers", "linear", "--no-step0-check", "--no-plots"]


def _wandb(tmp_path) -> Path:
    folder = tmp_path / "wandb"
    shutil.copytree(WANDB, folder)
    return folder


def test_a_folder_of_wandb_exports_is_analysed_in_one_command(tmp_path, caplog):
    """Before: one table per call (`unrecognized arguments`), no unit without --unit, 20 names typed out,
    the losses read as accuracies, one bad column per try."""
    folder = _wandb(tmp_path)
    out = tmp_path / "a"
    with caplog.at_level(logging.INFO, logger="oodcorr"):
        rc = main(
            [
                "analyse", str(folder / "*.csv"), "--format", "wide", "--in-domain", LOSS,
                "--testsets", "eval/downstream/*", "--metric", "*_soft_log=loglik",
                "--path-pattern", "{model}-seed{run}.csv", "--out", str(out), *FAST,
            ]
        )  # fmt: skip
    assert rc == 0, caplog.text
    assert "the unit is column '_step' (no column 'step'" in caplog.text
    assert caplog.text.count("metrics read from the column names: ") == 1  # said once, not per file
    assert f"metrics read from the column names: loss: {LOSS}; acc: eval/downstream/arc_easy_acc, " in caplog.text
    pc = pd.read_csv(out / "partial_correlations.csv")
    assert set(pc["model"]) == {"olmo-60m"} and set(pc["run"].astype(str)) == {"1", "2", "3", "pooled"}
    ood = {
        "eval/downstream/" + t
        for t in ("arc_easy_acc", "hellaswag_len_norm", "piqa_len_norm", "sciq_acc", "winogrande_acc")
    } | {"eval/downstream/arc_easy_soft_log"}
    assert set(pc.x) | set(pc.y) == ood
    runs = pc[pc.run != "pooled"]
    wino = runs.x.str.contains("winogrande") | runs.y.str.contains("winogrande")
    assert set(runs.n_units) == {21}  # 21 evaluations; run 2 lost one of winogrande's
    assert set(runs.loc[wino & (runs.run.astype(str) == "2"), "n"]) == {20} and set(runs.loc[~wino, "n"]) == {21}
    settings = json.loads((out / "settings.json").read_text())
    files = sorted(str(p) for p in folder.glob("*.csv"))
    assert [i["path"] for i in settings["inputs"]] == files and all(len(i["sha256"]) == 64 for i in settings["inputs"])
    assert settings["unit"] == "_step" and settings["metric"] == "accuracy"


def test_without_a_pattern_each_file_is_a_run_named_by_its_file(tmp_path):
    folder = _wandb(tmp_path)
    files = sorted(str(p) for p in folder.glob("*.csv"))
    out = tmp_path / "b"
    args = ["--format", "wide", "--in-domain", LOSS, "--testsets", "eval/downstream/*_acc", "--out", str(out)]
    assert main(["analyse", *files, *args, *FAST, "-q"]) == 0
    pc = pd.read_csv(out / "partial_correlations.csv")
    assert set(pc["model"]) == {"wandb"}  # the folder's name
    assert set(pc["run"]) == {"olmo-60m-seed1", "olmo-60m-seed2", "olmo-60m-seed3", "pooled"}
    assert set(pc.x) | set(pc.y) == {f"eval/downstream/{t}_acc" for t in ("arc_easy", "sciq", "winogrande")}


def test_every_bad_column_is_named_in_one_message(tmp_path, caplog):
    """Before: each try named one bad column. Here the soft log-probability (below zero) and W&B's
    _runtime (seconds, kept by naming it) are both named, with the flag that reads them."""
    folder = _wandb(tmp_path)
    args = ["analyse", str(folder / "*seed1.csv"), "--format", "wide", "--in-domain", LOSS, "-q", *FAST]
    with caplog.at_level(logging.ERROR, logger="oodcorr"):
        assert main([*args, "--testsets", "eval/*", "_runtime", "--out", str(tmp_path / "c")]) == 2
    msg = caplog.text
    assert "2 columns hold a score outside their metric's range" in msg
    assert "column 'eval/downstream/arc_easy_soft_log', line 2: score -1.44327 is outside [0, 1]" in msg
    assert "column '_runtime', line 2: score 0.763775 is outside [0, 100]" not in msg  # in range as a percentage
    assert "column '_runtime', line " in msg and "is outside [0, 100]" in msg
    assert "--metric 'COLUMN=METRIC' (globs allowed" in msg
    assert not (tmp_path / "c").exists()


def test_losses_bpb_and_accuracies_are_each_judged_on_their_own(tmp_path, caplog):
    """Before: `the scores are percentages: their median is 1.11`, a median over losses and accuracies."""
    folder = _wandb(tmp_path)
    args = ["analyse", str(folder / "*seed1.csv"), "--format", "wide", "--in-domain", LOSS, *FAST, "-q"]
    testsets = ["eval/pile-validation/bpb", "eval/c4_en-validation/Perplexity", "eval/downstream/*_acc"]
    with caplog.at_level(logging.ERROR):
        assert main([*args, "--testsets", *testsets, "--out", str(tmp_path / "d")]) == 0
    assert "percentages" not in caplog.text
    pc = pd.read_csv(tmp_path / "d" / "partial_correlations.csv")
    assert {"eval/pile-validation/bpb", "eval/c4_en-validation/Perplexity"} <= set(pc.x) | set(pc.y)


def test_a_loss_in_domain_with_items_for_the_shares(tmp_path, caplog):
    """Before: a loss as the in-domain column, named with --column-metric, and --items was refused."""
    folder = _wandb(tmp_path)
    args = ["analyse", str(folder / "*seed1.csv"), "--format", "wide", "--in-domain", LOSS, *FAST]
    with caplog.at_level(logging.WARNING):
        rc = main([*args, "--testsets", "eval/downstream/*_acc", "--items", "500", "--out", str(tmp_path / "e")])
    assert rc == 0
    assert f"the metric of ['{LOSS}'] is not one, so their item noise is unknown" in caplog.text


def test_unknown_metric_names_are_refused_listing_the_known_ones(tmp_path, caplog):
    with pytest.raises(DataError, match=r"--metric: 'acuracy' is no metric this knows; .*accuracy.*loglik"):
        metric_flag(["acuracy"], "long")
    with pytest.raises(DataError, match=r"'lossy' is no metric this knows"):
        metric_flag(["eval/*=lossy"], "wide")
    assert metric_flag(["value=loss"], "long") == ("loss", {"value": "loss"})
    assert metric_flag(["*_soft=loglik", "f1"], "wide") == ("f1", {"*_soft": "loglik"})
    assert metric_flag([], "lm-eval") == ("acc", {}) and metric_flag(["acc_norm"], "lm-eval") == ("acc_norm", {})
    with pytest.raises(DataError, match="with --format lm-eval, give the one metric"):
        metric_flag(["x=acc"], "lm-eval")
    with caplog.at_level(logging.ERROR):  # from the command line, exit 2 and one line
        assert main(["analyse", str(WANDB / "olmo-60m-seed1.csv"), "--in-domain", LOSS, "--metric", "nope"]) == 2
    assert "'nope' is no metric this knows" in caplog.text


def test_the_unit_column_is_found_or_its_candidates_named():
    """Before: `no unit column 'step'; columns are [...97 names...]`, with no hint that `_step` is there."""
    assert find_unit(["_step", "a"], "t.csv") == (
        "_step",
        "t.csv: the unit is column '_step' (no column 'step'; --unit names another)",
    )
    assert find_unit(["step", "_step"], "t.csv") == ("step", "")
    with pytest.raises(
        DataError, match=r"several that may hold the step: \['_step', 'trainer/global_step'\]; name one with --unit"
    ):
        find_unit(["trainer/global_step", "_step", "a"], "t.csv")
    with pytest.raises(
        DataError, match=r"no unit column: none of \['step', '_step', 'global_step', 'trainer/global_step'\]"
    ):
        find_unit(["epoch", "a"], "t.csv")


def test_globs_choose_columns_and_an_exact_name_wins():
    """Before: `no column 'eval/downstream/*'`: 20 names typed out."""
    names = ["eval/a_acc", "eval/b_acc", "eval/*", "train/loss", "Eval/c_acc"]
    assert matching(names, ["eval/*_acc"], "--testsets") == ["eval/a_acc", "eval/b_acc"]  # case-sensitive
    assert matching(names, ["eval/*"], "--testsets") == ["eval/*"]  # the column of that name, not a glob
    assert matching(names, ["train/loss", "eval/?_acc"], "--exclude") == ["eval/a_acc", "eval/b_acc", "train/loss"]
    with pytest.raises(DataError) as e:  # every name that matches nothing, in one message
        matching(names, ["eval/z*", "test/*", "train/loss"], "--testsets")
    assert "--testsets: nothing is named 'eval/z*', 'test/*'" in str(e.value)


def test_two_files_that_give_one_model_and_run_are_refused(tmp_path, caplog):
    folder = _wandb(tmp_path)
    args = ["--format", "wide", "--in-domain", LOSS, "--testsets", "eval/downstream/*_acc", "-q", *FAST]
    with caplog.at_level(logging.ERROR):
        rc = main(["analyse", str(folder / "*.csv"), "--path-pattern", "{model}-seed*.csv", *args])
    assert rc == 2 and "model 'olmo-60m', run 'all' is in more than one of the files read" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.ERROR):
        assert main(["analyse", str(folder / "*.csv"), "--path-pattern", "{model}/{run}.json", *args]) == 2
    assert "3 file(s) do not match it" in caplog.text


def test_settings_json_reruns_the_analysis_to_identical_tables(tmp_path, caplog):
    """Before: settings.json lacked --testsets, --exclude, the metric flags, ...: no rerun from it."""
    folder = _wandb(tmp_path)
    first = tmp_path / "first"
    argv = [
        "analyse", str(folder / "*.csv"), "--format", "wide", "--in-domain", LOSS, "--testsets", "eval/downstream/*",
        "--exclude", "*winogrande*", "--metric", "*_soft_log=loglik", "--path-pattern", "{model}-seed{run}.csv",
        "--methods", "pearson", "spearman", "--residualisers", "linear", "--no-plots", "--out", str(first), "-q",
    ]  # fmt: skip
    assert main(argv) == 0
    settings = json.loads((first / "settings.json").read_text())
    assert settings["command"]["argv"] == argv
    recorded = settings["command"]["args"]
    assert recorded["exclude"] == ["*winogrande*"] and recorded["metric"] == ["*_soft_log=loglik"]
    assert recorded["methods"] == ["pearson", "spearman"] and recorded["no_plots"] is True
    again = tmp_path / "again"
    assert main(["analyse", "--from", str(first / "settings.json"), "--out", str(again), "-q"]) == 0
    for name in ("partial_correlations.csv", "agreement.csv"):
        assert (again / name).read_bytes() == (first / name).read_bytes(), name
    assert json.loads((again / "settings.json").read_text())["command"]["args"] == recorded | {"out": str(again)}
    # another flag beside --from would change what it records; an input changed since is not the data analysed
    with caplog.at_level(logging.ERROR):
        assert main(["analyse", "--from", str(first / "settings.json"), "--methods", "kendall", "-q"]) == 2
    assert "--methods given beside it would change that" in caplog.text
    (folder / "olmo-60m-seed2.csv").write_text((folder / "olmo-60m-seed2.csv").read_text().replace("0.2", "0.3", 1))
    caplog.clear()
    with caplog.at_level(logging.ERROR):
        assert main(["analyse", "--from", str(first / "settings.json"), "--out", str(tmp_path / "x"), "-q"]) == 2
    assert "olmo-60m-seed2.csv is missing or not the bytes analysed then" in caplog.text


def test_help_leads_with_the_essentials_and_names_the_metric_once(capsys):
    parser = build_parser(["analyse"])
    with pytest.raises(SystemExit):
        parser.parse_args(["analyse", "--help"])
    text = capsys.readouterr().out
    headings = [line for line in text.splitlines() if line.endswith(":") and not line.startswith((" ", "usage"))]
    assert headings[0] == "the essentials:" and "other:" in headings, headings
    essentials = text.split("the essentials:")[1].split("\n\n")[0]
    for flag in (
        "INPUT",
        "--in-domain",
        "--format",
        "--unit",
        "--testsets",
        "--exclude",
        "--metric",
        "--out",
        "--from",
    ):
        assert flag in essentials, flag
    assert text.index("the essentials:") < text.index("statistics:")
    for old in ("--score", "--column-metric", "--each-scale"):
        assert old not in text, old
        with pytest.raises(SystemExit):
            parser.parse_args(["analyse", "t.csv", "--in-domain", "x", old, "a"])


def test_a_long_tables_score_column_is_given_its_metric(tmp_path, caplog):
    """--metric COLUMN=METRIC in long format: a column named 'value' that holds losses (any number)."""
    rows = [(s, t, 3.0 - 0.01 * s + (0.1 * k if s % 2 else -0.1 * k)) for s in range(12) for k, t in enumerate("abcd")]
    path = tmp_path / "long.csv"
    path.write_text("step,testset,value\n" + "".join(f"{s},{t},{v}\n" for s, t, v in rows))
    args = ["analyse", str(path), "--in-domain", "a", *FAST, "-q"]
    with caplog.at_level(logging.ERROR):
        assert main([*args, "--out", str(tmp_path / "o1")]) == 2  # no column 'accuracy'
        assert main([*args, "--metric", "value", "--out", str(tmp_path / "o2")]) == 2  # 'value' is no metric
    assert "'value' is no metric this knows" in caplog.text
    assert main([*args, "--metric", "value=loss", "--out", str(tmp_path / "o3")]) == 0
    assert json.loads((tmp_path / "o3" / "settings.json").read_text())["metric"] == "loss"


def test_no_input_or_no_in_domain_is_one_line_naming_what_to_give(caplog):
    with caplog.at_level(logging.ERROR):
        assert main(["analyse", "--in-domain", "x"]) == 2
        assert main(["analyse", str(WANDB / "olmo-60m-seed1.csv")]) == 2
    assert (
        "no input: give a table (or several, or a glob such as 'exports/*.csv'), or --from settings.json" in caplog.text
    )
    assert "--in-domain: name the in-domain testset" in caplog.text


def test_a_files_own_run_column_wins_over_its_name_and_the_pattern_names_the_model(tmp_path, caplog):
    """Each file may hold several runs (a run column): its name then names no run; --path-pattern its model."""
    folder = tmp_path / "two"
    folder.mkdir()
    for i, model in enumerate(("m-a", "m-b")):
        lines = [
            f"{s},{t},{r},{0.5 + 0.01 * s + 0.02 * k * ((s + i + j) % 3):.4f}"
            for r, j in (("r1", 0), ("r2", 1))
            for s in range(10)
            for k, t in enumerate(("ind", "x", "y", "z"))
        ]
        (folder / f"{model}.csv").write_text("step,testset,run,accuracy\n" + "\n".join(lines) + "\n")
    args = ["analyse", str(folder / "*.csv"), "--in-domain", "ind", *FAST, "-q"]
    with caplog.at_level(logging.ERROR):
        assert main([*args, "--out", str(tmp_path / "o1")]) == 2
    assert "model 'two', run 'r1' is in more than one of the files read" in caplog.text
    assert main([*args, "--path-pattern", "{model}.csv", "--out", str(tmp_path / "o2")]) == 0
    pc = pd.read_csv(tmp_path / "o2" / "partial_correlations.csv")
    assert set(zip(pc.model, pc.run)) == {(m, r) for m in ("m-a", "m-b") for r in ("r1", "r2", "pooled")}
