"""The end-of-run report (oodcorr.launch.disk_checks): it names the published results, never
``.staging/``, and survives the files a kill leaves."""

import json
import shutil
import tempfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from oodcorr.core.atomic_write import write_json_atomic, write_jsonl_atomic
from oodcorr.core.errors import ConfigError
from oodcorr.core.model_entry import ModelEntry
from oodcorr.core.refusals import RefusalSlot, refusals_dir
from oodcorr.jobs.tokenize_testset import tokenize_testset
from oodcorr.launch.disk_checks import (
    REFUSALS_SHOWN,
    check_on_disk,
    end_of_run_report,
    end_of_run_warnings,
    truncation_warnings,
)
from oodcorr.launch.free_space import free_space_problems
from oodcorr.modeling import synthetic
from oodcorr.modeling.loading import load_tokenizer

from faults import fill, small_filesystem, use_up_inodes
from helpers import REPO, drop_shard, micro_config, micro_plan, sharded_copy


# ---- class 8: the success line names the published table ------------------------------------------
def test_the_end_of_run_lines_name_the_published_results_never_staging(tmp_path, monkeypatch):
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
    # what the Snakefile's onsuccess and onerror print (oodcorr.launch.snakefile)
    handlers = (REPO / "src/oodcorr/launch/snakefile.py").read_text()
    assert (
        "end_of_run_report(plan, failed=False, asked=asked)" in handlers
        and "end_of_run_report(plan, failed=True, local=local)" in handlers
    )


def test_a_run_that_asked_for_some_files_is_told_what_it_made_not_pointed_at_scores(tmp_path, monkeypatch):
    """`snakemake results/micro/data/x.jsonl` made that file only: its last lines say so, and point at
    no scores or answer (it pointed at scores.csv and partial correlations it had not made); the
    results an earlier run published are named as kept, where there are any."""
    monkeypatch.chdir(tmp_path)
    plan = micro_plan()
    asked = ["results/micro/data/synth-passive.jsonl"]
    lines = end_of_run_report(plan, failed=False, asked=asked)
    assert lines == [
        "oodcorr: made what was asked: results/micro/data/synth-passive.jsonl; no scores or answer were made by "
        "this run"
    ]
    Path(plan.paths.published).parent.mkdir(parents=True)
    Path(plan.paths.published).write_text("{}")
    lines = end_of_run_report(plan, failed=False, asked=asked)
    assert lines[-1] == (
        "oodcorr: the results published by an earlier run are as they were: results/micro/scores.csv, "
        "results/micro/analysis/"
    )
    assert not any("partial correlations in" in line for line in lines)
    assert end_of_run_report(plan, failed=False)[-1].startswith("oodcorr: scores in results/micro/scores.csv")


def test_the_end_of_run_handlers_survive_a_truncated_dataset_meta_file(tmp_path, monkeypatch):
    """The handler itself crashed (JSONDecodeError in onsuccess) on a meta file cut short; now the
    file is a warning naming it and what to do, and the rest of the report follows."""
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


def test_prompts_all_cut_are_said_at_the_end_of_the_run_even_beside_an_unreadable_meta_file(
    tmp_path, monkeypatch, tiny_models
):
    """Every prompt cut to max_length was said only in the job logs when the handler stopped on an
    unreadable meta file first; now both lines are printed, the 100 % case in words of its own."""
    monkeypatch.chdir(tmp_path)
    cfg = micro_config()
    plan = micro_plan({**cfg, "evaluation": {**cfg["evaluation"], "max_length": 8}})
    meta = Path("results/micro/data/synth-test.meta.json")
    meta.parent.mkdir(parents=True)
    meta.write_text("{")
    _tokenise_as_planned(plan, "micro-opt", "synth-overlap", tiny_models["opt"])
    lines = end_of_run_report(plan, failed=False)
    assert any(line.startswith(f"oodcorr: WARNING: {meta}: the description of prepared dataset") for line in lines)
    assert lines[-1] == (
        "oodcorr: WARNING: testset 'synth-overlap', model 'micro-opt': all 60 prompts (100%) are longer than "
        "evaluation.max_length (8 tokens) and were cut, keeping their end; raise evaluation.max_length to score "
        "whole examples"
    )  # the console's last line (issue 47): after where the results are, not above them
    assert lines[-2].startswith("oodcorr: scores in results/micro/scores.csv")
    failed = end_of_run_report(plan, failed=True)
    assert failed[-1] == lines[-1]  # a run that failed says it last too (no job's refusal here)


# ---- issue 41: a model whole, and its tokenizer within its embeddings, before any job --------------
def _local_model_plan(folder):
    cfg = micro_config()
    cfg["models"] = [{"name": "local", "path": str(folder)}]
    cfg.pop("pretraining_corpus", None)
    return micro_plan(cfg)


def test_planning_refuses_a_sharded_model_whose_index_leaves_out_a_deleted_shard(tmp_path, tiny_models):
    """Before: planned (every shard the index names is there) and finetuned on embeddings started from
    random values."""
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
        load_tokenizer(ModelEntry(name="local", path=str(folder)))  # and in every job that loads it


# ---- issue 39: the truncation warnings describe what this run tokenises ----------------------------
def _tokenise_as_planned(plan, model, testset, tiny_src):
    """``testset`` tokenised for ``model`` as rule tokenize_testset does it with this plan's params (its
    data prepared first); returns the job's ``{"n", "n_truncated"}``."""
    params = plan.tokenize_params(SimpleNamespace(model=model))
    if not Path(params["built_model_dir"]).exists():
        shutil.copytree(tiny_src, params["built_model_dir"])
    data, meta = plan.paths.data.format(dataset=testset), plan.paths.data_meta.format(dataset=testset)
    write_jsonl_atomic(data, synthetic.generate("negation", 60, 0))
    write_json_atomic(meta, {"fingerprint": f"synthetic:{testset}", "records_sha256": "r"})
    out = plan.paths.tokenized.format(model=model, testset=testset)
    return tokenize_testset(**params, testset=testset, data_path=data, data_meta=meta, out_path=out)


def test_truncation_warnings_are_of_what_this_run_tokenises_not_of_an_earlier_max_length(
    tmp_path, monkeypatch, tiny_models
):
    """An experiment tokenised at max_length 24, planned again at 8: the warning said the old caches'
    share at 24 tokens (and the run then cut every prompt to 8). Now a sidecar made with other
    settings is of a cache this run makes again and says nothing; once made at 8, its share is said."""
    monkeypatch.chdir(tmp_path)
    cfg = micro_config()
    before = micro_plan({**cfg, "evaluation": {**cfg["evaluation"], "max_length": 24}})
    model, testset = "micro-opt", "synth-negation"
    got = _tokenise_as_planned(before, model, testset, tiny_models["opt"])
    assert 0.05 < got["n_truncated"] / got["n"] < 1  # the earlier run cut some prompts, and was warned
    assert any("(24 tokens)" in w for w in truncation_warnings(before))
    now = micro_plan({**cfg, "evaluation": {**cfg["evaluation"], "max_length": 8}})
    assert not any(testset in w for w in truncation_warnings(now))  # not the earlier run's numbers
    assert not any("24 tokens" in line for line in end_of_run_report(now, failed=True))  # a run that stopped early
    _tokenise_as_planned(now, model, testset, tiny_models["opt"])  # this run tokenises it at 8
    assert truncation_warnings(now) == [
        f"testset {testset!r}, model {model!r}: all 60 prompts (100%) are longer than evaluation.max_length (8 "
        "tokens) and were cut, keeping their end; raise evaluation.max_length to score whole examples"
    ]
    Path(now.paths.tokenized.format(model=model, testset=testset)).unlink()  # its cache gone: made again
    assert truncation_warnings(now) == []


# ---- issue 39: room on the file systems a run writes in besides its results, checked while planning --
def test_a_full_tmpdir_and_inode_less_folders_are_named_while_planning(tmp_path, monkeypatch):
    """TMPDIR full: Snakemake's ILP scheduler died writing its solver's files there, with a traceback
    through pulp; a lock folder or --shadow-prefix without inodes left failed later, never naming
    inodes. Each is named now, with its folder and what to do; the greedy scheduler needs no room."""
    monkeypatch.chdir(tmp_path)
    plan = micro_plan()
    with small_filesystem(tmp_path / "tmp", "256k") as tmp, small_filesystem(tmp_path / "locks", "1m", 64) as locks:
        fill(tmp)
        use_up_inodes(locks)
        monkeypatch.setenv("TMPDIR", str(tmp))
        monkeypatch.delenv("TMP", raising=False)
        monkeypatch.setattr(tempfile, "tempdir", None)  # Python reads TMPDIR again
        monkeypatch.setenv("OODCORR_LOCK_DIR", str(locks))
        said = free_space_problems(plan, ["snakemake", "--shadow-prefix", str(locks / "shadow")])
        assert len(said) == 2, said  # one sentence per file system
        assert said[0].startswith(f"no room to run: the temp folder of Snakemake's scheduler (TMP, else TMPDIR), {tmp}")
        assert "0 B free" in said[0] and "--scheduler greedy" in said[0] and "export TMPDIR=" in said[0]
        assert str(locks) in said[1] and f"no free inodes (0 of 64; each file takes one: `df -i {locks}" in said[1]
        greedy = free_space_problems(plan, ["snakemake", "--scheduler", "greedy"])
        assert not any("scheduler" in s for s in greedy)
        assert any(s.startswith(f"no room to run: the temp folder (TMPDIR), {tmp}") for s in greedy)
        report = free_space_problems(plan, ["snakemake", "--scheduler=greedy", f"--report={tmp}/report.html"])
        assert report[0].startswith(f"no room to run: the folder of --report, {tmp}, has 0 B free")


# ---- issue 39: each job's refusal, repeated as the last lines of a failed run --------------------------
def test_a_failed_runs_last_lines_are_its_jobs_sentences_a_full_disk_first(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    plan = micro_plan()
    folder = refusals_dir(plan.paths.logs)
    for i in range(REFUSALS_SHOWN + 2):  # evaluations refused first, then a full disk while tokenising
        doc = {"rule": "evaluate", "wildcards": {"step": str(i)}, "log": f"logs/eval/{i}.log", "kind": "refused"}
        RefusalSlot(folder, f"eval{i}").fill(doc | {"message": f"checkpoint {i} not usable", "time": f"t{i}"})
    full = {"rule": "tokenize_testset", "wildcards": {"model": "m", "testset": "t"}, "log": "logs/tok.log"}
    RefusalSlot(folder, "tok").fill(full | {"message": "t.pt: no room in x", "kind": "disk full", "time": "t9"})
    RefusalSlot(folder, "running")  # a job still running, or killed: nothing to say
    lines = end_of_run_report(plan, failed=True)
    tail = lines[-(REFUSALS_SHOWN + 1) :]
    assert (
        tail[0]
        == "oodcorr: job tokenize_testset (model=m, testset=t) stopped: t.pt: no room in x (its log: logs/tok.log)"
    )
    assert tail[1] == "oodcorr: job evaluate (step=0) stopped: checkpoint 0 not usable (its log: logs/eval/0.log)"
    assert tail[-1] == "oodcorr: and 3 more jobs stopped (3 evaluate); each log's last line says why"
    assert not any(line.startswith("oodcorr: job ") for line in end_of_run_report(plan, failed=False))  # succeeded


def test_a_job_killed_on_this_machine_is_named_with_its_memory_key_and_value(tmp_path, monkeypatch):
    """A job killed before it could say why (the kernel's out-of-memory killer) was said only in
    Snakemake's error, `died with <Signals.SIGKILL: 9>` (issue 53). Now a failed local run names it, with
    its rule's memory key and value in the config and what they do here; on SLURM the watcher says it."""
    monkeypatch.chdir(tmp_path)
    cfg = micro_config()
    cfg["resources"] = {"evaluate": {"mem_mb": 1500}}
    plan = micro_plan(cfg)
    wildcards = {"model": "micro-opt", "step": "4", "testset": "synth-test"}
    doc = {"rule": "evaluate", "wildcards": wildcards, "log": "logs/e.log", "kind": "killed", "time": "t1"}
    RefusalSlot(refusals_dir(plan.paths.logs), "e", killed=doc | {"message": "killed before it could say why"})
    last = end_of_run_report(plan, failed=True, local=True)[-1]
    assert last.startswith(
        "oodcorr: job evaluate (model=micro-opt, step=4, testset=synth-test) was killed before it could say why. "
    )
    assert "out-of-memory killer" in last and "`resources.evaluate.mem_mb: 1500` in the config" in last
    assert (
        "--resources mem_mb=N" in last and "`evaluation.batch_size`" in last and last.endswith("(its log: logs/e.log)")
    )
    assert not any("killed" in line for line in end_of_run_report(plan, failed=True))  # SLURM: the watcher's
