"""The workflow through Snakemake after something went wrong or changed: a killed finetune or
Snakemake, a job killed for memory, switches, a deleted or cut file, a full disk (the finished micro
run copied; tests/helpers.py: finished_micro)."""

import json
import os
import subprocess
import time

import pandas as pd
import pytest
import yaml

from helpers import REPO, SNAKEMAKE, TRACKERS, copy_run, finished_micro, job_counts, micro_config, smk

pytestmark = pytest.mark.slow


R = "results/micro"  # config/micro.yaml's experiment folder
RUN = "micro-opt/synth/n64/seed0"


@pytest.fixture(scope="module")
def micro_run(tmp_path_factory):
    """config/micro.yaml as shipped (evaluation.unit checkpoint), logging to TensorBoard, MLflow and W&B,
    finished. No test runs in this folder: each works on its own copy (copy_run), so a copy is finished
    as made."""
    return finished_micro(tmp_path_factory, "micro", "checkpoint", TRACKERS)


def _predictions(wd):
    return {p.relative_to(wd): pd.read_parquet(p) for p in sorted((wd / R / "eval").rglob("*.predictions.parquet"))}


def test_finetune_killed_under_snakemake_resumes(micro_run, tmp_path):
    """SIGKILL the finetune job's process: Snakemake fails the job and deletes its declared
    output (the manifest) but not the checkpoints, and the rerun resumes from them. (In a copy of the
    finished run with its finetune deleted: the data and the built model are there already.)"""
    import shutil
    import signal

    wd = copy_run(micro_run, tmp_path, "killed-finetune")
    shutil.rmtree(wd / R / "finetune")
    cfg = micro_config()
    cfg["finetune"].update(max_steps=600, checkpoints={"every": 100})
    path = wd / "slow.yaml"
    path.write_text(yaml.safe_dump(cfg))
    cmd = [
        SNAKEMAKE,
        "-s",
        str(REPO / "Snakefile"),
        "-d",
        str(wd),
        "--configfile",
        str(path),
        "--cores",
        "1",
        f"{R}/finetune/{RUN}/manifest.json",
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    run = wd / R / f"finetune/{RUN}"
    marker = run / "checkpoints/checkpoint-200/oodcorr_manifest.json"
    deadline = time.time() + 600
    while not marker.exists():
        assert proc.poll() is None, "snakemake ended before checkpoint 200"
        assert time.time() < deadline
        time.sleep(0.1)
    # the job's own Python process (not Snakemake) dies, as under an OOM killer
    pids = subprocess.run(["pgrep", "-f", "finetune.py"], capture_output=True, text=True).stdout.split()
    victims = [int(p) for p in pids if os.getpgid(int(p)) == proc.pid]
    assert victims
    for pid in victims:
        os.kill(pid, signal.SIGKILL)
    assert proc.wait(timeout=120) != 0
    assert not (run / "manifest.json").exists()
    assert (run / "checkpoints/checkpoint-200/model.safetensors").exists()

    res = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    info = json.loads((run / "manifest.json").read_text())
    resumed = int(info["resumed_from"].rsplit("-", 1)[1])
    assert resumed >= 200 and [c["step"] for c in info["checkpoints"]] == list(range(0, 601, 100))


def test_a_first_run_names_a_job_killed_for_memory_and_the_prompts_max_length_cut(tmp_path):
    """A first run (nothing on disk while planning) with evaluation.max_length 8, whose evaluation is
    killed as the kernel's out-of-memory killer does: its console's last lines name the killed job with
    its memory key and value (before: only Snakemake's `died with <Signals.SIGKILL: 9>`), and the share
    of the prompts cut, of the caches this run made (issue 53)."""
    from hooks.sitecustomize import PYTHONPATH_ENTRY, SIMULATE_OOM_ENV

    cfg = micro_config()
    cfg["evaluation"]["max_length"] = 8
    cfg["resources"] = {"evaluate": {"mem_mb": 1500}}
    path = tmp_path / "cut.yaml"
    path.write_text(yaml.safe_dump(cfg))
    env = {
        SIMULATE_OOM_ENV: "kill:1",  # the evaluation's first forward pass SIGKILLs its process
        "PYTHONPATH": os.pathsep.join(p for p in (PYTHONPATH_ENTRY, os.environ.get("PYTHONPATH")) if p),
    }
    res = smk(tmp_path, path, f"{R}/eval/{RUN}/step0/synth-test.predictions.parquet", env=env)
    assert res.returncode != 0
    lines = [line for line in res.stdout.splitlines() if line.startswith("oodcorr: ")]
    assert lines[-1].startswith(
        "oodcorr: job evaluate (model=micro-opt, indomain=synth, ntrain=64, seed=0, step=0, testset=synth-test) was "
        "killed before it could say why"
    ), res.stdout[-3000:]
    assert "`resources.evaluate.mem_mb: 1500` in the config" in lines[-1]
    assert (
        "oodcorr: WARNING: testset 'synth-test', model 'micro-opt': all 60 prompts (100%) are longer than "
        "evaluation.max_length (8 tokens) and were cut" in res.stdout
    )


AUTHORS_SWITCHES = {
    "prompt.strip_fields": False,
    "prompt.truncation": "right",
    "prompt.scored_position": "padded-end",
    "finetune.loss": "vocabulary",
}
DEFAULTS_SPELLED_OUT = {
    "prompt.strip_fields": True,
    "prompt.truncation": "left",
    "prompt.scored_position": "last-token",
    "finetune.loss": "verbalisers",
    "analysis.score": "accuracy",
}
ANALYSIS_JOBS = {
    "partial_correlations",
    "heatmap",
    "heatmap_grid",
    "learning_curves",
    "scatter",
    "publish_results",
    "explorer",
    "all",
}
# what a change of the scores or of the training reruns besides: the accuracy table, the loss figure
NEW_SCORES = {"aggregate_scores", "accuracy_table"}


def _switched(cfg, changes):
    import copy

    out = copy.deepcopy(cfg)
    out.setdefault(
        "prompt",
        {
            "template": "{premise} Question: {hypothesis} Yes or No?",
            "verbalisers": {"entailment": " Yes", "non-entailment": " No"},
        },
    )
    for key, value in changes.items():
        block, _, leaf = key.partition(".")
        out[block][leaf] = value
    return out


def test_each_switch_reruns_what_it_changes_and_nothing_else(micro_run, tmp_path):
    """On the finished micro experiment: a prompt switch reruns the tokenisation, the finetune and
    the evaluations; finetune.loss the finetune and the evaluations; analysis.score the analysis
    only; every switch spelled out at its default reruns nothing. Then the micro config with the
    authors' switches runs for real, and its records and manifest say what they did."""
    wd = copy_run(micro_run, tmp_path, "switches")
    cfg = micro_run[1]
    expect = {
        "prompt.strip_fields": {"tokenize_testset", "finetune", "training_loss", "evaluate"}
        | NEW_SCORES
        | ANALYSIS_JOBS,
        "prompt.truncation": {"tokenize_testset", "finetune", "training_loss", "evaluate"} | NEW_SCORES | ANALYSIS_JOBS,
        "prompt.scored_position": {"tokenize_testset", "finetune", "training_loss", "evaluate"}
        | NEW_SCORES
        | ANALYSIS_JOBS,
        "finetune.loss": {"finetune", "training_loss", "evaluate"} | NEW_SCORES | ANALYSIS_JOBS,
        "analysis.score": ANALYSIS_JOBS,
    }
    values = dict(AUTHORS_SWITCHES, **{"analysis.score": "macro_f1"})
    for key, rules in expect.items():
        path = wd / f"switch-{key}.yaml"
        path.write_text(yaml.safe_dump(_switched(cfg, {key: values[key]})))
        dry = smk(wd, path, "-n")
        assert dry.returncode == 0, dry.stderr[-3000:]
        assert set(job_counts(dry.stdout)) == rules, key
    path = wd / "defaults.yaml"
    path.write_text(yaml.safe_dump(_switched(cfg, DEFAULTS_SPELLED_OUT)))
    dry = smk(wd, path, "-n")
    assert dry.returncode == 0 and "Nothing to be done" in dry.stdout + dry.stderr, dry.stdout[-2000:]

    from oodcorr.core.records import read_result

    before = _predictions(wd)
    path = wd / "authors.yaml"
    authors = _switched(cfg, dict(AUTHORS_SWITCHES, **{"analysis.score": "macro_f1"}))
    authors["evaluation"]["unit"] = "run"  # 3 evaluation processes, not 15: the same files (test_workflow.py)
    path.write_text(yaml.safe_dump(authors))
    res = smk(wd, path)
    assert res.returncode == 0, res.stderr[-3000:]
    assert json.loads((wd / R / f"finetune/{RUN}/manifest.json").read_text())["loss"] == "vocabulary"
    rec = read_result(wd / R / f"eval/{RUN}/step8/synth-overlap.predictions.parquet")
    assert rec["reading"] == {"strip_fields": False, "truncation": "right", "scored_position": "padded-end"}
    # the micro testsets' files (an earlier test may have added a testset that this config drops)
    micro = {d["test"] for d in cfg["in_domain"]} | set(cfg["ood_testsets"])
    after = {k: v for k, v in _predictions(wd).items() if k.name.split(".")[0] in micro}
    step0 = [k for k in after if "/step0/" in str(k)]
    later = [k for k in after if "/step0/" not in str(k)]
    # step 0 is the pretrained model read another way; later steps also differ in training
    assert all(not after[k]["logit_entailment"].equals(before[k]["logit_entailment"]) for k in step0 + later)
    pairs = pd.read_csv(wd / R / "analysis/partial_correlations.csv")
    assert pairs.ex_note.str.contains("not run for analysis.score macro_f1").all()
    assert "score analysed: macro_f1" in (wd / R / "logs/analyse/partial_correlations.log").read_text()
    scores = pd.read_csv(wd / R / "scores.csv")
    # the analysis read macro_f1: the same r as oodcorr analyse --metric macro_f1 on this table
    from oodcorr.cli import main

    rc = main(
        [
            "analyse",
            str(wd / R / "scores.csv"),
            "--in-domain",
            "synth-test",
            "--metric",
            "macro_f1",
            "--methods",
            "pearson",
            "--residualisers",
            "spline",
            "--out",
            str(tmp_path / "cli"),
            "--no-plots",
        ]
    )
    assert rc == 0 and scores.macro_f1.notna().all()
    cli = pd.read_csv(tmp_path / "cli/partial_correlations.csv")
    key = ["run", "x", "y"]
    got = pairs[pairs.run != "pooled"].set_index(key).r
    want = cli[cli.run != "pooled"].set_index(key).r
    pd.testing.assert_series_equal(got.sort_index(), want.sort_index())


def test_a_deleted_predictions_file_is_rebuilt_by_the_next_run(micro_run, tmp_path):
    """Unit checkpoint: the predictions file is a declared output that rule all asks for, so
    deleting it reruns its evaluation alone. (Before: "Nothing to be done", then the analysis
    failed on the missing file.)"""
    wd = copy_run(micro_run, tmp_path, "deleted")
    gone = wd / R / f"eval/{RUN}/step8/synth-overlap.predictions.parquet"
    before, scores = pd.read_parquet(gone), pd.read_csv(wd / R / "scores.csv")
    gone.unlink()
    dry = smk(wd, micro_run[2], "-n")
    assert dry.returncode == 0, dry.stderr[-3000:]
    assert job_counts(dry.stdout).get("evaluate") == 1
    res = smk(wd, micro_run[2])
    assert res.returncode == 0, res.stderr[-3000:]
    pd.testing.assert_frame_equal(pd.read_parquet(gone), before)
    pd.testing.assert_frame_equal(pd.read_csv(wd / R / "scores.csv"), scores)


def test_the_same_command_reruns_after_snakemake_is_killed(micro_run, tmp_path):
    """Snakemake SIGKILLed with its job running (its process group, as a lost login session or a
    scheduler's kill): the same command again releases the lock it left (its PID on this host is gone,
    and no run holds the experiment's lock), says so in one line, and finishes. (Before: refused until
    `--unlock` was run: two commands after every kill.)"""
    import signal

    wd = copy_run(micro_run, tmp_path, "killed-snakemake")
    gone = wd / R / f"eval/{RUN}/step8/synth-overlap.predictions.parquet"
    gone.unlink()
    cmd = [SNAKEMAKE, "-s", str(REPO / "Snakefile"), "-d", str(wd), "--configfile", str(micro_run[2]), "--cores", "2"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    runs = wd / R / "logs/.runs.json"
    deadline = time.time() + 600
    # recorded in onstart, once Snakemake holds its lock and before any job starts
    while not (runs.exists() and f'"pid": {proc.pid}' in runs.read_text()):
        assert proc.poll() is None, "snakemake ended before it was killed"
        assert time.time() < deadline
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    assert list((wd / ".snakemake/locks").glob("*.lock"))  # the lock it left
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "oodcorr: released Snakemake's lock on the files of experiment 'micro'" in res.stderr
    assert "--unlock` once" not in res.stderr and gone.exists()


def test_a_failed_analysis_leaves_the_previous_results_in_place(micro_run, tmp_path):
    """The staged scores table truncated: the analysis stops with a message naming it, the
    published scores, tables and figures stay byte for byte; deleting it as the message says
    and running again publishes a full set. (Before: the analysis read results/.../scores.parquet
    itself and Snakemake had already deleted partial_correlations.csv when it crashed.)"""
    wd = copy_run(micro_run, tmp_path, "truncated")
    staged = wd / R / ".staging/scores.parquet"
    published_scores = tmp_path / "published.parquet"
    published_scores.write_bytes((wd / R / "scores.parquet").read_bytes())
    published = {
        p: p.read_bytes()
        for p in [wd / R / "scores.parquet", wd / R / "scores.csv", *sorted((wd / R / "analysis").rglob("*.*"))]
    }
    assert wd / R / "analysis/partial_correlations.csv" in published
    staged.write_bytes(staged.read_bytes()[:300])
    res = smk(wd, micro_run[2])
    assert res.returncode != 0
    said = res.stdout + res.stderr
    # on the console's last lines (issue 47): named, and that deleting it is safe and makes it again
    assert f"{R}/.staging/scores.parquet changed after the job that made it wrote it" in said, said[-3000:]
    assert "deleting it is safe: delete it and run again, and rule aggregate_scores makes it again" in said
    assert {p: p.read_bytes() for p in published} == published
    staged.unlink()
    res = smk(wd, micro_run[2])
    assert res.returncode == 0, res.stderr[-3000:]
    assert pd.read_parquet(wd / R / "scores.parquet").equals(pd.read_parquet(published_scores))


# ---- a job's refusal reaches the console's last lines, whichever job it was (issue 39) --------------
FULL_AT = {  # the job, what makes it run again, and the temporary file it makes just when the disk fills
    "tokenize_testset": (f"{R}/cache/tokenized/micro-opt/synth-negation.pt", ".synth-negation.pt."),
    "aggregate_scores": ("aggregate_scores", ".scores.parquet."),
    "accuracy_table": ("accuracy_table", ".accuracy.html."),
    "publish_results": ("publish_results", ".new-"),
}


@pytest.mark.parametrize("rule", list(FULL_AT))
def test_a_full_disk_in_any_job_is_said_in_the_consoles_last_lines_with_the_job_named(rule, micro_run, tmp_path):
    """The finished run copied onto a small file system that fills just as the job writes its output (a
    real ENOSPC). Its sentence (the folder, what to delete) was in the job's log only, and the log was
    empty when the disk was full; the console's last lines said that the run failed and the previous
    results stand. Now they repeat it, naming the job (after them, only Snakemake's own closing lines)."""
    from hooks.sitecustomize import FILL_AT_ENV, PYTHONPATH_ENTRY

    from faults import small_filesystem

    forced, prefix = FULL_AT[rule]
    with small_filesystem(tmp_path / "disk", "64m") as disk:
        wd = copy_run(micro_run, disk, "wd")
        cmd = [SNAKEMAKE, "-s", str(REPO / "Snakefile"), "-d", str(wd), "--configfile", str(micro_run[2])]
        hooks = os.pathsep.join(p for p in (PYTHONPATH_ENTRY, os.environ.get("PYTHONPATH")) if p)
        # the console as a person sees it: stdout and stderr in the order they were written
        res = subprocess.run(
            [*cmd, "--cores", "2", "--forcerun", forced],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=600,
            env={**os.environ, FILL_AT_ENV: prefix, "PYTHONPATH": hooks, "PYTHONUNBUFFERED": "1"},
        )
        out = res.stdout.strip()
        assert res.returncode != 0, out[-3000:]
        said = [line for line in out.splitlines()[-10:] if line.startswith(f"oodcorr: job {rule}")]
        assert len(said) == 1, out[-3000:]
        assert " stopped: " in said[0] and f"no room in {R}" in said[0] and f"(its log: {R}/logs/" in said[0]
        if rule == "tokenize_testset":
            assert said[0].startswith(
                "oodcorr: job tokenize_testset (model=micro-opt, testset=synth-negation) stopped:"
            )
        assert not list(wd.rglob(".*.tmp"))  # and nothing half-written was kept
