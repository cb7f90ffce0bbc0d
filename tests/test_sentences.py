"""Raw tracebacks where a sentence belongs (issue 25, class 7).

What a tired user (or a full disk) leaves, and what each now reads as: a truncated run manifest,
dataset meta file or staged scores table (in the jobs that read them); a model folder with junk
``model.safetensors`` beside a pickle; a tab-separated file named ``.csv``; text units, an ``inf``
score; ``1e-3`` written for a number; an ``n_train`` below the number of labels. Each message names
the file (or key) and what to do; the end-of-run handler's own case is in test_cluster_habits.py
and, through Snakemake, in test_bad_inputs.py.
"""

from __future__ import annotations

import json
import logging
import re
import runpy
import types
from pathlib import Path

import pandas as pd
import pytest
import yaml

from oodcorr.core.errors import ConfigError, DataError

from helpers import BINARY, REPO

SCRIPTS = REPO / "workflow/scripts"


class Wildcards(dict):
    """Snakemake's wildcards: a mapping whose items are attributes too."""

    __getattr__ = dict.__getitem__


def run_script(name: str, tmp_path: Path, **fields):
    """Run a rule's script as Snakemake would, with a stand-in ``snakemake`` object; returns the
    message of the ``sys.exit`` it ends with (None if it ends normally)."""
    sm = types.SimpleNamespace(log=[str(tmp_path / f"{name}.log")], config={}, wildcards=types.SimpleNamespace())
    for k, v in fields.items():
        setattr(sm, k, v)
    try:
        runpy.run_path(str(SCRIPTS / f"{name}.py"), init_globals={"snakemake": sm}, run_name="__main__")
    except SystemExit as e:
        return str(e.code)
    finally:
        logging.getLogger().handlers.clear()  # setup_logging added a file handler for the job's log
    return None


def _truncated(path: Path, doc: dict) -> Path:
    text = json.dumps(doc, indent=2)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text[: len(text) // 2])
    return path


# ---- truncated records the workflow wrote ---------------------------------------------------------
def test_a_truncated_run_manifest_is_named_with_the_way_out(tmp_path):
    """The evaluate job reads the run's manifest first: a truncated one stopped it with a JSONDecodeError."""
    from oodcorr.core.errors import ResultError
    from oodcorr.jobs.evaluate import checkpoints_to_score

    man = _truncated(tmp_path / "run/manifest.json", {"steps": [0, 4, 8], "trained": True, "loss_history": []})
    with pytest.raises(ResultError) as e:
        checkpoints_to_score([str(man)], [0], [str(tmp_path / "p.parquet")])
    assert re.fullmatch(
        rf"{re.escape(str(man))}: a checkpoint manifest is unreadable \(truncated or damaged: .* at line \d+, column "
        r"\d+\); delete it and run again: its job writes it again \(a finetune whose checkpoints are all there does "
        r"not train again, it checks them\)",
        str(e.value),
    ), str(e.value)


def test_the_evaluate_job_ends_with_that_sentence_not_a_traceback(tmp_path):
    man = _truncated(tmp_path / "run/manifest.json", {"steps": [0, 4], "trained": True})
    msg = run_script(
        "evaluate",
        tmp_path,
        config={"evaluation": {"batch_size": 8, "max_tokens": 512}},
        params=types.SimpleNamespace(job={}),
        resources=types.SimpleNamespace(attempt=1, gpu=0),
        wildcards=Wildcards(step="0"),
        input=types.SimpleNamespace(manifest=str(man), tokenized=str(tmp_path / "t.pt")),
        output=[str(tmp_path / "p.parquet")],
        threads=1,
    )
    assert msg is not None and msg.startswith(f"oodcorr: {man}: a checkpoint manifest is unreadable"), msg


def test_a_truncated_staged_scores_table_stops_the_report_tables_with_a_sentence(tmp_path):
    staged = tmp_path / "results/x/.staging/scores.parquet"
    staged.parent.mkdir(parents=True)
    pd.DataFrame({"accuracy": [0.5] * 100}).to_parquet(staged)
    staged.write_bytes(staged.read_bytes()[:200])
    msg = run_script(
        "report_tables",
        tmp_path,
        rule="accuracy_table",
        input=[str(staged)],
        output=types.SimpleNamespace(html=str(tmp_path / "a.html"), csv=str(tmp_path / "a.csv")),
        config={"experiment": "x"},
    )
    assert msg is not None and msg.startswith(f"oodcorr: {staged}: not a readable scores table ("), msg
    assert msg.endswith("delete it and run again: the aggregation rebuilds it from the evaluation results")


def test_a_truncated_manifest_stops_the_training_loss_figure_with_a_sentence(tmp_path):
    man = _truncated(tmp_path / "finetune/m/d/n4/seed0/manifest.json", {"loss_history": [{"step": 1, "loss": 1.0}]})
    msg = run_script(
        "report_tables",
        tmp_path,
        rule="training_loss",
        input=[str(man)],
        output=[str(tmp_path / "loss.png")],
        wildcards=types.SimpleNamespace(model="m"),
    )
    assert msg is not None and msg.startswith(f"oodcorr: {man}: a run's manifest is unreadable (truncated"), msg


def test_a_truncated_dataset_meta_file_stops_tokenising_with_a_sentence(tmp_path, tiny_models):
    from oodcorr.core.errors import ResultError
    from oodcorr.jobs.tokenize_testset import tokenize_testset

    from helpers import LABELS, PROMPT

    data = tmp_path / "data/t.jsonl"
    data.parent.mkdir()
    data.write_text(json.dumps({"premise": "a cat", "hypothesis": "an animal", "label": "entailment"}) + "\n")
    meta = _truncated(tmp_path / "data/t.meta.json", {"name": "t", "n": 1, "fingerprint": "sha256:" + "0" * 64})
    with pytest.raises(ResultError, match=rf"^{re.escape(str(meta))}: the prepared dataset's description is "):
        tokenize_testset(
            model_spec={"name": "m", "path": str(tiny_models["opt"])},
            tiny_dir=None,
            testset="t",
            data_path=str(data),
            data_meta=str(meta),
            labels=LABELS,
            prompt=PROMPT,
            max_length=64,
            coarse=None,
            out_path=str(tmp_path / "cache/t.pt"),
        )


# ---- a model folder with junk weights --------------------------------------------------------------
@pytest.mark.parametrize(
    "junk, why",
    [
        (b"<html>502 Bad Gateway</html>", r"its first 8 bytes give a header of \d+ bytes, in a file of 28"),
        (b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all", r"its header is not JSON \(JSONDecodeError\)"),
        (b"\x02\x00\x00\x00\x00\x00\x00\x00[]", r"its header is not a JSON mapping of tensor names"),
        (b"abc", r"3 bytes, too short for a safetensors file"),
    ],
)
def test_junk_model_safetensors_beside_a_pickle_is_refused_while_planning(tmp_path, tiny_models, junk, why):
    """Before: accepted (a .safetensors file is there), then the job stopped with the loader's
    HeaderTooLarge traceback, even with allow_pickle_weights (transformers prefers safetensors)."""
    import shutil

    import torch
    from safetensors.torch import load_file

    from oodcorr.core.model_dirs import check_local_weights

    folder = tmp_path / "model"
    shutil.copytree(tiny_models["opt"], folder)
    torch.save(load_file(folder / "model.safetensors"), folder / "pytorch_model.bin")
    (folder / "model.safetensors").write_bytes(junk)
    for spec in ({"name": "m"}, {"name": "m", "allow_pickle_weights": True}):
        with pytest.raises(ConfigError) as e:
            check_local_weights(str(folder), spec)
        assert re.fullmatch(
            rf"models\[m\]: {re.escape(str(folder))}/model\.safetensors is not a readable safetensors file \(.*"
            rf"{why}\); it is damaged or not weights at all: copy or download the model again\. A pickle file is "
            r"beside it \(pytorch_model\.bin\): to load that instead, move the \.safetensors file away and set "
            r"allow_pickle_weights: true on this model \(only for a model you trust\)\.",
            str(e.value),
        ), str(e.value)
    (folder / "model.safetensors").unlink()  # moved away: the pickle loads once opted in
    check_local_weights(str(folder), {"name": "m", "allow_pickle_weights": True})


def test_a_safetensors_file_cut_short_or_a_junk_config_json_is_refused(tmp_path, tiny_models):
    import shutil

    from oodcorr.core.model_dirs import check_local_weights

    folder = tmp_path / "model"
    shutil.copytree(tiny_models["opt"], folder)
    w = folder / "model.safetensors"
    whole = w.read_bytes()
    w.write_bytes(whole[:-100])
    with pytest.raises(ConfigError, match=r"lies past the end of the file \(cut short\?\)\); it is damaged or not "):
        check_local_weights(str(folder), {"name": "m"})
    w.write_bytes(whole)
    (folder / "config.json").write_text('{"model_type": "op')
    with pytest.raises(ConfigError, match=r"config\.json is not readable JSON \(JSONDecodeError: .*\); copy or "):
        check_local_weights(str(folder), {"name": "m"})


# ---- tables and datasets as people have them ------------------------------------------------------
def test_a_tab_separated_dataset_named_csv_is_named_as_such(tmp_path):
    from oodcorr.jobs.data import prepare

    path = tmp_path / "export.csv"
    path.write_text("premise\thypothesis\tlabel\nA cat, asleep.\tAn animal.\tentailment\n")
    with pytest.raises(DataError) as e:
        prepare("d", {"source": "local", "path": str(path)}, BINARY)
    assert str(e.value) == (
        f"{path}:1: the header holds tabs and no comma, so the file looks tab-separated, but its name says "
        "otherwise; name it .tsv (compressed: .tsv.gz), or set `format: tsv` on the dataset entry"
    )
    recs, _ = prepare("d", {"source": "local", "path": str(path), "format": "tsv"}, BINARY)  # what it says to do
    assert recs[0]["premise"] == "A cat, asleep."


def test_a_comma_separated_dataset_named_tsv_is_named_as_such(tmp_path):
    from oodcorr.jobs.data import prepare

    path = tmp_path / "export.tsv"
    path.write_text("premise,hypothesis,label\nA cat.,An animal.,entailment\n")
    with pytest.raises(DataError, match=r"export\.tsv:1: the header holds commas and no tab, so the file looks "):
        prepare("d", {"source": "local", "path": str(path)}, BINARY)


def test_a_tab_separated_scores_table_named_csv_is_named_as_such(tmp_path, caplog):
    from oodcorr.cli import main

    path = tmp_path / "scores.csv"
    path.write_text("step\ttestset\taccuracy\n0\tmnli\t0.5\n")
    with caplog.at_level(logging.ERROR):
        assert main(["analyse", str(path), "--in-domain", "mnli", "--out", str(tmp_path / "o")]) == 2
    assert (
        f"{path}:1: the header holds tabs and no comma, so the file looks tab-separated, but its name says "
        "otherwise; name it .tsv (compressed: .tsv.gz)"
    ) in caplog.text


def _wide_rows(units, extra=None):
    rows = ["unit,mnli,a,b,c"]
    for i, u in enumerate(units):
        rows.append(f"{u},{0.5 + 0.01 * i},{0.4 + 0.02 * i},{0.3 + 0.015 * (i % 3)},{0.6 - 0.01 * i}")
    if extra:
        rows[extra[0]] = extra[1]
    return "\n".join(rows) + "\n"


def _analyse_wide(path, out):
    from oodcorr.cli import main

    return main(
        [
            "analyse",
            str(path),
            "--format",
            "wide",
            "--unit",
            "unit",
            "--in-domain",
            "mnli",
            "--no-plots",
            "--out",
            str(out),
        ]
    )


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


# ---- the config ----------------------------------------------------------------------------------------
def _micro() -> dict:
    return yaml.safe_load((REPO / "config/micro.yaml").read_text())


def test_a_number_yaml_reads_as_text_gets_the_spelling_that_works(tmp_path):
    from oodcorr.planning.plan import load

    path = tmp_path / "lr.yaml"
    path.write_text((REPO / "config/micro.yaml").read_text().replace("learning_rate: 0.003", "learning_rate: 3e-3"))
    path.write_text(path.read_text().replace("max_steps: 16", "max_steps: 1.6e1"))
    cfg = yaml.safe_load(path.read_text())
    assert cfg["finetune"]["learning_rate"] == "3e-3"  # YAML 1.1: no dot in the mantissa, so text
    with pytest.raises(ConfigError) as e:
        load(cfg, REPO, sources=[path])
    msg = str(e.value)
    assert (
        f"{path}:30: finetune.learning_rate: must be a number, got a string '3e-3'; YAML reads 3e-3 as text (its "
        "numbers in exponent notation need a dot and a signed exponent): write 3.0e-3"
    ) in msg, msg
    assert (
        f"{path}:28: finetune.max_steps: must be an integer, got a string '1.6e1'; YAML reads 1.6e1 as text (its "
        "numbers in exponent notation need a dot and a signed exponent): write 16\n"
    ) in msg, msg
    for fixed in ("3.0e-3", "0.003"):  # and the spelling it gives reads as a number
        assert isinstance(yaml.safe_load(f"x: {fixed}")["x"], float)


def test_an_n_train_below_the_number_of_labels_says_so(tmp_path):
    from oodcorr.planning.plan import load

    cfg = _micro()
    cfg["label_mode"] = "three-way"
    cfg["prompt"] = {
        "template": "{premise} Question: {hypothesis} Yes, no, or maybe?",
        "verbalisers": {"entailment": " Yes", "neutral": " Maybe", "contradiction": " No"},
    }
    cfg["finetune"]["n_train"] = [2]
    with pytest.raises(ConfigError) as e:
        load(cfg, REPO)
    assert str(e.value) == (
        "finetune.n_train: 2 is fewer than the 3 labels of label mode 'three-way' (entailment, neutral, "
        "contradiction); a run trains on n_train / 3 examples of each label, so n_train must be a multiple of 3, "
        "at least 3"
    )
    cfg["finetune"]["n_train"] = [6]
    cfg["models"][0]["finetune"] = {"n_train": [7]}
    with pytest.raises(ConfigError, match=r"^models\[micro-opt\]\.finetune\.n_train: 7 is not a multiple of the 3 "):
        load(cfg, REPO)
