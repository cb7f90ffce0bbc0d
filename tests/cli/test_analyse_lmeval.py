"""``oodcorr analyse DIR --format lm-eval``: a folder of lm-evaluation-harness results analysed directly,
the forest plots and the answer's summary; a refused folder writes nothing."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from oodcorr.analysis.simulate.runs import study_table
from oodcorr.cli import main

DATE = "2026-01-02T03-04-05.678901"
N_DOCS = 200
PEARSON_LINEAR = ["--methods", "pearson", "--residualisers", "linear"]


def _lm_eval(folder, *args, in_domain="in-domain"):
    """Exit status of `oodcorr analyse FOLDER --format lm-eval --in-domain IN_DOMAIN ARGS`."""
    return main(["analyse", str(folder), "--format", "lm-eval", "--in-domain", in_domain, *args])


def write_lmeval(root: Path, table: pd.DataFrame, samples: bool = True) -> None:
    """A simulated study written as lm-eval would: OUT/<model>/results_<date>.json per checkpoint (each
    score rounded to k/N_DOCS), and samples_<task>_<date>.jsonl beside it whose 0/1 values average it."""
    rng = np.random.default_rng(0)
    for (model, unit), g in table.groupby(["model", "unit"]):
        folder = root / f"org__{model}" / f"step{unit}"
        folder.mkdir(parents=True)
        results = {}
        for task, score in zip(g["testset"], g["score"]):
            k = int(round(float(np.clip(score, 0, 1)) * N_DOCS))
            results[task] = {"alias": task, "acc,none": k / N_DOCS, "acc_stderr,none": 0.03}
            if samples:
                correct = np.zeros(N_DOCS, int)
                correct[rng.choice(N_DOCS, k, replace=False)] = 1
                with open(folder / f"samples_{task}_{DATE}.jsonl", "w") as fh:
                    for i, c in enumerate(correct):
                        fh.write(
                            json.dumps({"doc_id": i, "filter": "none", "acc": float(c), "metrics": ["acc"]}) + "\n"
                        )
        doc = {
            "results": results,
            "n-samples": {t: {"original": N_DOCS, "effective": N_DOCS} for t in results},
            "config": {"model": "hf", "model_args": f"pretrained=org/{model},revision=step{unit}"},
        }
        (folder / f"results_{DATE}.json").write_text(json.dumps(doc))


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    rng = np.random.default_rng(5)
    table = study_table(rng, [0.5, 0.45, 0.55], 1, 12, 0.3, n_ood=3)
    table["score"] = 0.3 + 0.4 * (table["score"] - table["score"].min()) / np.ptp(table["score"])
    table["unit"] = table["unit"] * 1000
    root = tmp_path_factory.mktemp("lmeval")
    write_lmeval(root / "out", table)
    return root / "out"


def test_a_folder_of_lm_eval_results_is_analysed_with_forest_plots_and_the_answer_said(folder, tmp_path, caplog):
    out = tmp_path / "a"
    caplog.set_level(logging.INFO, logger="oodcorr")
    tasks = ["--tasks", "ood0,ood1,ood2"]
    assert _lm_eval(folder, *tasks, "--out", str(out), *PEARSON_LINEAR, "--no-step0-check", "--example-boot", "20") == 0
    pc = pd.read_csv(out / "partial_correlations.csv")
    assert set(pc["model"]) == {"org/m0", "org/m1", "org/m2"} and set(pc["n_units"]) == {12}
    assert pc["ex_ci_low"].notna().any()  # the samples files fed the example-level bootstrap
    forest = sorted(p.name for p in (out / "forest" / "in-domain").iterdir())
    assert forest == ["ood0+ood1.png", "ood0+ood2.png", "ood1+ood2.png"]
    settings = json.loads((out / "settings.json").read_text())
    assert (
        settings["format"] == "lm-eval" and settings["metric"] == "acc" and len(settings["inputs"][0]["sha256"]) == 64
    )
    *_, answer, last = [r.getMessage() for r in caplog.records]
    assert answer.startswith(f"the answer, {out}/agreement.csv (pearson, linear): in-domain in-domain: 3 pairs")
    assert (
        f"consensus heatmap {out}/consensus/in-domain.png, forest plots (why each pair) in {out}/forest/in-domain/"
        in answer
    )
    assert last.startswith(f"every pair, explored in a browser (one file, offline): {out}/explorer.html (3 pairs")


def test_forest_pairs_and_the_cap(folder, tmp_path, caplog):
    out = tmp_path / "b"
    common = [*PEARSON_LINEAR, "--no-step0-check", "--no-samples"]
    caplog.set_level(logging.INFO, logger="oodcorr")
    assert _lm_eval(folder, *common, "--out", str(out), "--forest-max", "1") == 0
    assert len(list((out / "forest" / "in-domain").iterdir())) == 1
    assert any("forest plots of in-domain in-domain: 1 of its 3 pairs" in r.getMessage() for r in caplog.records)
    assert _lm_eval(folder, *common, "--out", str(tmp_path / "c"), "--forest-pairs", "ood2+ood0") == 0
    assert [p.name for p in (tmp_path / "c" / "forest" / "in-domain").iterdir()] == ["ood0+ood2.png"]
    assert _lm_eval(folder, *common, "--out", str(tmp_path / "d"), "--forest-pairs", "ood0+nope") == 2


def test_a_refused_folder_writes_nothing(folder, tmp_path, caplog):
    bad = tmp_path / "bad"
    bad.mkdir()
    for f in folder.rglob("results_*.json"):
        dest = bad / f.relative_to(folder)
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(f.read_text())
    victim = sorted(bad.rglob("results_*.json"))[5]
    victim.write_text(victim.read_text()[:-30])  # cut short, as by a killed evaluation
    out = tmp_path / "out"
    assert _lm_eval(bad, "--out", str(out)) == 2 and not out.exists()
    assert any(str(victim) in r.getMessage() and "not valid JSON" in r.getMessage() for r in caplog.records)


def test_lm_eval_flags_are_refused_for_a_table_and_table_flags_for_lm_eval(folder, tmp_path, caplog):
    table = tmp_path / "t.csv"
    table.write_text("step,testset,accuracy\n0,a,0.5\n")
    assert main(["analyse", str(table), "--in-domain", "a", "--tasks", "a,b", "--out", str(tmp_path / "o")]) == 2
    assert "--tasks: reads lm-evaluation-harness results (--format lm-eval)" in caplog.text
    assert _lm_eval(folder, "--model", "m", "--out", str(tmp_path / "p")) == 2
    assert "--model: not read with --format lm-eval" in caplog.text


def test_a_misspelt_in_domain_task_is_named_as_such_with_the_task_meant(folder, tmp_path, caplog):
    """`--tasks ... --in-domain in-domian` (a typo) blamed --tasks and hid the task meant; now the
    message names --in-domain and the closest task, with --tasks as without it; a misspelt --tasks
    entry gets its own 'did you mean'."""
    out = ["--out", str(tmp_path / "o")]
    for tasks in (["--tasks", "ood0,ood1,ood2"], []):
        caplog.clear()
        assert _lm_eval(folder, *out, *tasks, in_domain="in-domian") == 2
        assert "'in-domian'" in caplog.text and "did you mean 'in-domain'?" in caplog.text, caplog.text
        assert "--tasks in-domian" not in caplog.text
    caplog.clear()
    assert _lm_eval(folder, *out, "--tasks", "ood0,od1") == 2
    assert "--tasks od1: in none of the" in caplog.text and "od1: did you mean 'ood1'?" in caplog.text, caplog.text
    assert not (tmp_path / "o").exists()


def test_a_checkpoint_without_the_in_domain_task_is_named_and_said_to_be_left_out(folder, tmp_path, caplog):
    """One checkpoint's results file lacks the in-domain task: the warning names that file, its model
    and step and the task, and says the checkpoint is left out of the analysis, as it is."""
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    victim = sorted(copy.rglob("results_*.json"))[3]
    doc = json.loads(victim.read_text())
    del doc["results"]["in-domain"]
    victim.write_text(json.dumps(doc))
    (victim.parent / f"samples_in-domain_{DATE}.jsonl").unlink()
    step = int(victim.parent.name.removeprefix("step"))
    model = doc["config"]["model_args"].split(",")[0].removeprefix("pretrained=")
    out = tmp_path / "o"
    caplog.set_level(logging.INFO, logger="oodcorr")
    assert _lm_eval(copy, "--out", str(out), *PEARSON_LINEAR, "--no-step0-check", "--no-plots") == 0
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(
        f"{victim} (model {model}, step {step}) has no in-domain" in m and "1 of 36 checkpoints lack tasks" in m
        for m in said
    ), said
    assert any(
        "1 checkpoint(s) have no score of the in-domain task 'in-domain' and are left out of the analysis" in m
        and f"model {model}, step {step} ({victim})" in m
        for m in said
    ), said
    pc = pd.read_csv(out / "partial_correlations.csv")
    n_units = pc[(pc.run != "pooled")].groupby("model")["n"].first().to_dict()
    assert n_units[model] == 11 and all(v == 12 for m, v in n_units.items() if m != model)  # left out, as said


def write_items(root: Path, long: pd.DataFrame, items: pd.DataFrame, groups: dict) -> None:
    """A study simulated item by item (:func:`oodcorr.analysis.simulate.items.item_table`) written as
    lm-eval writes it with --log_samples: per model and step a results file (each task's accuracy, its
    size in n-samples, the groups in group_subtasks with their score, the mean over their subtasks'
    items) and one samples file per task (a group has none), each line one document's 0/1."""
    for model, unit in long[["model", "unit"]].drop_duplicates().itertuples(index=False):
        folder = root / model.replace("/", "__") / f"step{unit}"
        folder.mkdir(parents=True)
        ex = items[(items["model"] == model) & (items["unit"] == unit)]
        results, n = {}, {}
        for task, e in ex.groupby("testset"):
            results[task] = {"alias": task, "acc,none": float(e["correct"].mean()), "acc_stderr,none": 0.02}
            n[task] = {"original": len(e), "effective": len(e)}
            with open(folder / f"samples_{task}_{DATE}.jsonl", "w") as fh:
                for doc, c in zip(e["example"], e["correct"]):
                    line = {"doc_id": int(doc), "doc": {"q": f"question {doc}"}, "target": "A", "filter": "none"}
                    fh.write(json.dumps({**line, "metrics": ["acc"], "acc": float(c)}) + "\n")
        for group, kids in groups.items():
            results[group] = {"alias": group, "acc,none": float(ex[ex["testset"].isin(kids)]["correct"].mean())}
        doc = {
            "results": results,
            "group_subtasks": {**groups, **{t: [] for t in n}},
            "n-samples": n,
            "config": {"model": "hf", "model_args": f"pretrained={model},revision=step{unit}"},
        }
        (folder / f"results_{DATE}.json").write_text(json.dumps(doc))


def test_samples_give_each_tasks_item_noise_and_a_group_beside_its_subtasks_is_left_out(tmp_path, caplog):
    """--log_samples files read as per-item correctness give every task's item noise: the cross-fitted
    correlation (r_eiv), the tasks' correlation and each series' reliability, equal to analyse() on the
    same items; the group beside its own subtasks (group_subtasks) is not correlated with them, and the
    agreement row says why."""
    from oodcorr.analysis import Options, analyse
    from oodcorr.analysis.simulate.items import item_table

    long, items = item_table(np.random.default_rng(8), [0.5, 0.5, 0.5, 0.5], 1, 10, (240, 120, 120))
    names = {"in-domain": "ind", "ood0": "arc", "ood1": "piqa"}
    for t in (long, items):
        t["model"] = "org/" + t["model"]
        t["run"] = "all"
        t["testset"] = t["testset"].map(names)
    long["in_domain"] = "ind"
    keys = ["model", "run", "unit", "testset"]  # the simulator's float32 means, as the harness writes them
    long = long.drop(columns="score").merge(items.groupby(keys, as_index=False)["correct"].mean(), on=keys)
    long = long.rename(columns={"correct": "score"})
    write_items(tmp_path / "lm", long, items, {"both": ["arc", "piqa"]})
    out = tmp_path / "out"
    caplog.set_level(logging.INFO, logger="oodcorr")
    args = ["--out", str(out), *PEARSON_LINEAR, "--example-boot", "0", "--no-plots"]
    assert _lm_eval(tmp_path / "lm", *args, in_domain="ind") == 0
    pc = pd.read_csv(out / "partial_correlations.csv", keep_default_na=False, na_values=[""])
    pair = pc[(pc["x"] == "arc") & (pc["y"] == "piqa")].set_index("run")
    runs = pair.drop(index="pooled")
    assert len(runs) == 4 and (runs["eiv_from"] == "items").all()
    assert runs["noise"].eq("ind, arc, piqa: item noise estimated from per-item correctness").all()
    for c in ("r_eiv", "ci_low_eiv", "p_eiv", "reliability_x", "reliability_y", "reliability_in_domain"):
        assert np.isfinite(runs[c]).all(), c
    assert ((runs["reliability_x"] > 0) & (runs["reliability_x"] < 1)).all()  # 120 items: noise is a real share
    # the same numbers as the analysis of the simulated tables themselves
    direct = analyse(long, Options(methods=("pearson",), residualisers=("linear",), example_boot=0, pool_by=()), items)
    d = direct[(direct["x"] == "arc") & (direct["y"] == "piqa")].set_index(["model", "run"])
    p = pair.reset_index().set_index(["model", "run"]).loc[d.index]
    for c in ("r", "r_eiv", "r_corrected", "reliability_x", "reliability_y", "reliability_in_domain", "task_cov"):
        np.testing.assert_allclose(p[c].to_numpy(float), d[c].to_numpy(float), rtol=1e-9, atol=1e-12, err_msg=c)
    # the group and its own subtasks share items: left out, saying so, here and in the answer
    grouped = pc[pc["y"] == "both"]
    assert set(grouped["x"]) == {"arc"} and set(pc[pc["x"] == "both"]["y"]) == {"piqa"}
    left = pc[(pc["x"] == "arc") & (pc["y"] == "both") | (pc["x"] == "both") & (pc["y"] == "piqa")]
    assert left["r"].isna().all() and len(left) == 2 * (4 + 4)  # 4 runs, 4 pooled rows
    assert (
        left[left["run"] != "pooled"]["note"]
        .str.match(r"(arc and both|both and piqa) share items \(both includes")
        .all()
    )
    agree = pd.read_csv(out / "agreement.csv", keep_default_na=False).set_index(["x", "y"])
    assert agree.loc[("arc", "both"), "verdict"] == "no data"
    assert agree.loc[("arc", "both"), "note"].startswith("arc and both share items (both includes arc)")
    assert agree.loc[("arc", "piqa"), "about"] == "tasks"
    assert -1 <= float(agree.loc[("arc", "piqa"), "r_consensus_corrected"]) <= 1  # the models' moments pooled
    assert "1 OOD pair(s) share items" not in caplog.text and "2 OOD pair(s) share items" in caplog.text
