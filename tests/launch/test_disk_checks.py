"""The end-of-run report (oodcorr.launch.disk_checks): it names the published results, never
``.staging/``, and survives the files a kill leaves."""

import json
from pathlib import Path

from helpers import micro_plan


# ---- class 8: the success line names the published table ------------------------------------------
def test_the_end_of_run_lines_name_the_published_results_never_staging(tmp_path, monkeypatch):

    from oodcorr.launch.disk_checks import end_of_run_report

    from helpers import REPO

    monkeypatch.chdir(tmp_path)
    plan = micro_plan()
    lines = end_of_run_report(plan, failed=False)
    assert lines[-1] == (
        "oodcorr: scores in results/micro/scores.csv, partial correlations in "
        "results/micro/analysis/partial_correlations.csv, heatmaps in results/micro/analysis/heatmaps/"
    )
    assert not any(".staging" in line for line in lines)
    # nothing published yet: no line says the previous results are kept
    assert not any("previous results" in line for line in end_of_run_report(plan, failed=True))
    snakefile = (REPO / "Snakefile").read_text()
    assert "end_of_run_report(PLAN, failed=False)" in snakefile and "end_of_run_report(PLAN, failed=True)" in snakefile


def test_the_end_of_run_handlers_survive_a_truncated_dataset_meta_file(tmp_path, monkeypatch):
    """The handler itself crashed (JSONDecodeError in onsuccess) on a meta file cut short; now the
    file is a warning naming it and what to do, and the rest of the report follows."""

    from oodcorr.launch.disk_checks import end_of_run_warnings

    monkeypatch.chdir(tmp_path)
    plan = micro_plan()
    meta = Path("results/micro/data/synth-test.meta.json")
    meta.parent.mkdir(parents=True)
    meta.write_text('{"name": "synth-test", "n": 60, "warn')
    warnings = end_of_run_warnings(plan)
    assert warnings == [
        f"{meta}: the description of prepared dataset 'synth-test' is unreadable (JSONDecodeError: Unterminated "
        "string starting at: line 1 column 33 (char 32)); delete it and run again: the dataset is prepared again"
    ]


def test_prompts_all_cut_are_said_at_the_end_of_the_run_even_beside_an_unreadable_meta_file(tmp_path, monkeypatch):
    """Every prompt cut to max_length was said only in the job logs when the handler stopped on an
    unreadable meta file first; now both lines are printed, the 100 % case in words of its own."""

    from oodcorr.launch.disk_checks import end_of_run_report

    monkeypatch.chdir(tmp_path)
    plan = micro_plan()
    meta = Path("results/micro/data/synth-test.meta.json")
    meta.parent.mkdir(parents=True)
    meta.write_text("{")
    info = Path("results/micro/cache/tokenized/micro-opt/synth-overlap.info.json")
    info.parent.mkdir(parents=True)
    info.write_text(json.dumps({"n": 60, "n_truncated": 60, "max_length": 8}))
    lines = end_of_run_report(plan, failed=False)
    assert any(line.startswith(f"oodcorr: WARNING: {meta}: the description of prepared dataset") for line in lines)
    assert (
        "oodcorr: WARNING: testset 'synth-overlap', model 'micro-opt': all 60 prompts (100%) are longer than "
        "evaluation.max_length (8 tokens) and were cut, keeping their end; raise evaluation.max_length to score "
        "whole examples"
    ) in lines
    assert lines[-1].startswith("oodcorr: scores in results/micro/scores.csv")


# ---- issue 41: a model whole, and its tokenizer within its embeddings, before any job --------------
def _local_model_plan(folder):
    from helpers import micro_config

    cfg = micro_config()
    cfg["models"] = [{"name": "local", "path": str(folder)}]
    cfg.pop("pretraining_corpus", None)
    return micro_plan(cfg)


def test_planning_refuses_a_sharded_model_whose_index_leaves_out_a_deleted_shard(tmp_path, tiny_models):
    """Before: planned (every shard the index names is there) and finetuned on embeddings started from
    random values."""
    import pytest

    from oodcorr.core.errors import ConfigError
    from oodcorr.launch.disk_checks import check_on_disk

    from helpers import drop_shard, sharded_copy

    folder = sharded_copy(tiny_models["opt"], tmp_path / "sharded")
    plan = _local_model_plan(folder)
    check_on_disk(plan)  # whole: planned
    gone = drop_shard(folder)
    with pytest.raises(ConfigError) as e:
        check_on_disk(plan)
    assert "models[local]" in str(e.value) and f"leaves out {gone}" in str(e.value)


def test_planning_refuses_a_tokenizer_larger_than_the_embeddings(tmp_path, tiny_models):
    """Before: planned; a prompt holding such an id (the padding, a special token) stopped the finetune with
    an index error inside the embedding lookup."""
    import shutil

    import pytest

    from oodcorr.core.errors import ConfigError
    from oodcorr.launch.disk_checks import check_on_disk
    from oodcorr.modeling.loading import load_tokenizer

    folder = tmp_path / "model"
    shutil.copytree(tiny_models["opt"], folder)
    plan = _local_model_plan(folder)
    check_on_disk(plan)
    cfg = json.loads((folder / "config.json").read_text())
    rows = cfg["vocab_size"]
    tok = json.loads((folder / "tokenizer.json").read_text())
    top = max(tok["model"]["vocab"].values())
    assert top < rows
    tok["added_tokens"].append({**tok["added_tokens"][0], "id": rows + 5, "content": "<|new|>"})
    tok["model"]["vocab"]["<|new|>"] = rows + 5
    (folder / "tokenizer.json").write_text(json.dumps(tok))
    with pytest.raises(ConfigError) as e:
        check_on_disk(plan)
    msg = str(e.value)
    assert "models[local]" in msg and f"token ids up to {rows + 5}" in msg and f"have {rows} rows" in msg, msg
    with pytest.raises(ConfigError, match=rf"token ids up to {rows + 5}, but the model's input embeddings have {rows}"):
        load_tokenizer({"name": "local", "path": str(folder)})  # and in every job that loads it
