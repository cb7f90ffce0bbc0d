"""Two runs of one experiment: the second is refused while planning, before any job of it starts,
naming the holder (even with --no-hooks, which skips onstart, and whichever run reaches its first
job first); a dry run is never refused and takes no lock."""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import textwrap

import pytest
import yaml

from oodcorr.core import locks
from oodcorr.core.locks import EXPERIMENT, FINETUNE, PUBLISH, hold
from oodcorr.launch.experiment import ANALYSIS_RULES, config_warning, lock, lock_and_record, may_write

from faults import start_stopped, wait_for
from helpers import MICRO, REPO, micro_config, micro_plan, smk

# another run of the experiment: it holds the lock until it is killed
HOLDER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from oodcorr.core.locks import EXPERIMENT, hold
    with hold(sys.argv[1], EXPERIMENT, extra={"config": "other.yaml"}):
        Path(sys.argv[2]).write_text("held")
        while True:
            time.sleep(1)
    """
)


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["snakemake"], True),
        (["snakemake", "--cores", "2", "--no-hooks"], True),
        (["snakemake", "-j1", "--until", "finetune"], True),
        (["snakemake", "-n"], False),
        (["snakemake", "-np"], False),
        (["snakemake", "--dry-run"], False),
        (["snakemake", "--report", "r.html"], False),
        (["snakemake", "--unlock"], False),
        (["snakemake", "--summary"], False),
    ],
)
def test_which_snakemake_commands_may_write(argv, expected):
    assert may_write(argv) is expected


@pytest.mark.slow
def test_a_second_run_is_refused_while_planning_before_any_job_naming_the_holder(tmp_path):
    cfg = yaml.safe_load((REPO / "config/micro.yaml").read_text())
    cfg_path = tmp_path / "micro.yaml"
    cfg_path.write_text(yaml.safe_dump(cfg))
    root = tmp_path / "results" / "micro"
    held = tmp_path / "held"
    holder = start_stopped(HOLDER, str(root), str(held))
    try:
        wait_for(held, holder, timeout=60)
        # --no-hooks: Snakemake skips onstart; --until bounds what a run that is not refused would do
        res = smk(tmp_path, cfg_path, "--no-hooks", "--until", "prepare_dataset", timeout=600)
        assert res.returncode != 0
        assert "is in use by another run of the workflow" in res.stderr and f"PID {holder.pid}" in res.stderr
        assert "other.yaml" in res.stderr
        # before any job: nothing of the experiment was made (its data, logs) and no job was started
        assert sorted(p.name for p in root.iterdir()) == [".lock-places", "experiment.lock"]  # the lock and its place
        assert "Select jobs to execute" not in res.stdout + res.stderr
        # a dry run is not refused (it writes nothing)
        dry = smk(tmp_path, cfg_path, "-n", timeout=600)
        assert dry.returncode == 0, dry.stderr[-3000:]
    finally:
        holder.kill()
        holder.wait()


# ---- an experiment folder copied (cp -al) and run under another config (issue 41) -------------------
def _release_experiment(root) -> None:
    """Let go of the experiment lock claim/lock keep for the rest of the process (a run's whole life)."""
    held = locks._HELD.get(str((root / locks.EXPERIMENT.file).resolve()))
    if held is not None:
        locks.release(held)


def _copied_experiment(tmp_path, monkeypatch):
    """results/micro written by a run of config/micro.yaml here (its record, its lock, a run folder's
    finetune lock, a published lock), then copied as results/micro2 with `cp -al` (every file a hard
    link); returns (config of micro2, plan of micro2, the copy)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.argv", ["snakemake", "--cores", "2"])
    config = micro_config()
    plan = micro_plan(config)
    assert lock_and_record(plan, [MICRO], config) is None
    root = tmp_path / plan.paths.root
    _release_experiment(root)
    run_dir = tmp_path / os.path.dirname(plan.paths.manifest.format(**plan.runs[0].wildcards))
    run_dir.mkdir(parents=True)
    (run_dir / "finetune.lock").write_text("")
    (root / ".published").mkdir()
    (root / ".published" / "publish.lock").write_text("")
    copy = root.with_name("micro2")
    shutil.copytree(root, copy, copy_function=os.link)
    return copy


def test_a_folder_copied_with_cp_al_takes_its_locks_anew_and_the_original_keeps_its_own(tmp_path, monkeypatch):
    """A lock file with another name (the folder copied with `cp -al`) that no run holds is made anew where
    it is taken (oodcorr.core.locks): the experiment's at planning, a run folder's and the published
    folder's by their jobs; the folder it was copied from keeps its own, never written by the copy's run."""
    copy = _copied_experiment(tmp_path, monkeypatch)
    plan = micro_plan(dict(micro_config(), experiment="micro2"))
    linked = [p for p in copy.rglob("*.lock") if p.stat().st_nlink > 1]
    assert len(linked) == 3
    originals = [tmp_path / "results/micro" / p.relative_to(copy) for p in linked]
    before = [p.read_bytes() for p in originals]
    assert lock(plan, [MICRO]) is None  # the same config but for its name: the same command runs
    for p in linked:
        if p.name != "experiment.lock":
            with hold(p.parent, FINETUNE if p.name == FINETUNE.file else PUBLISH):
                pass
    assert all(p.stat().st_nlink == 1 for p in linked + originals)
    assert [p.read_bytes() for p in originals] == before  # the other folder's lock files untouched
    _release_experiment(copy)


def test_a_linked_lock_that_a_run_holds_is_left_and_refused(tmp_path, monkeypatch):
    """Copied with `cp -al` while a run of the other folder held its lock: the lock is that run's, so this
    folder's name of it is not removed on a guess; the run is refused, naming it."""
    monkeypatch.chdir(tmp_path)
    root = tmp_path / "results/micro"
    with hold(root, EXPERIMENT):  # a run of results/micro, while the folder is copied
        shutil.copytree(root, root.with_name("micro2"), copy_function=os.link)
        plan = micro_plan(dict(micro_config(), experiment="micro2"))
        refusal = lock(plan, [MICRO])
        copied = root.with_name("micro2") / "experiment.lock"
        assert refusal is not None and str(copied) in refusal and "hard links" in refusal, refusal
        assert copied.stat().st_nlink == 2


def test_a_copy_with_linked_locks_under_a_config_that_changes_it_is_refused_once_with_a_way_out_that_works(
    tmp_path, monkeypatch
):
    """The linked locks need no step of the user's; the one refusal (the copy was written by another
    config) gives a way out that, followed, lets the run go ahead."""
    copy = _copied_experiment(tmp_path, monkeypatch)
    config = dict(micro_config(), experiment="micro2")
    config["finetune"] = dict(config["finetune"], learning_rate=0.001)
    plan = micro_plan(config)
    mine = tmp_path / "micro2.yaml"
    config_warning(plan, [mine], config)  # as the Snakefile: the config's warnings, then the lock
    refusal = lock(plan, [mine])
    assert refusal is not None and "Snakemake keeps no record here" in refusal and "lock file" not in refusal
    option = re.search(r"run once with `(--[a-z]+)`", refusal).group(1)  # the way out it gives
    _release_experiment(copy)
    monkeypatch.setattr(sys, "argv", ["snakemake", "--cores", "2", option])
    config_warning(plan, [mine], config)
    assert lock(plan, [mine]) is None  # no further refusal
    _release_experiment(copy)


@pytest.mark.parametrize(
    ("change", "needs", "forced"),
    [
        (
            lambda c: c["analysis"].update(methods=["pearson", "spearman"]),
            "--forcerun partial_correlations scatter learning_curves",
            ["--forcerun", "partial_correlations", "scatter", "learning_curves"],
        ),
        (lambda c: c["finetune"].update(learning_rate=0.001), "--forceall", ["-F"]),
    ],
)
def test_a_copied_folder_under_a_config_that_changes_it_is_refused_until_the_run_reruns_the_change(
    tmp_path, monkeypatch, change, needs, forced
):
    """Before: warned that "its results replace those", then Snakemake said "Nothing to be done": it
    reruns for a changed setting only from its records, kept by each output's path in the working
    folder's .snakemake/, and the copy's paths have none. The results stayed the other config's."""
    copy = _copied_experiment(tmp_path, monkeypatch)
    config = dict(micro_config(), experiment="micro2")
    change(config)
    plan = micro_plan(config)
    mine = tmp_path / "micro2.yaml"
    warning = config_warning(plan, [mine], config)
    assert "Snakemake keeps no record here of the settings its results were made with" in warning
    assert f"its results were made as {tmp_path / 'results/micro'}" in warning and needs in warning
    assert lock(plan, [mine]) == warning  # a run that may write is refused, before any job
    _release_experiment(copy)
    monkeypatch.setattr(sys, "argv", ["snakemake", "--cores", "2", *forced])
    assert config_warning(plan, [mine], config) is None or "no record" not in config_warning(plan, [mine], config)
    assert lock(plan, [mine]) is None  # the run that reruns what the change needs goes ahead
    assert lock_and_record(plan, [mine], config) is None
    record = json.loads((copy / "experiment.json").read_text())
    assert record["folder"] == str(copy.resolve()) and record["config"]["analysis"] == config["analysis"]
    assert record["records"] == ("complete" if "-F" in forced else "partial")
    _release_experiment(copy)


def test_the_rules_a_change_of_the_analysis_reruns_are_the_rules_that_read_it():
    """What a copied folder's refusal says to force when only the analysis changed: every rule whose
    params read the analysis block (ANALYSIS, the plotted method and residualiser, PLAN.score) and is
    not downstream of partial_correlations (those run again after it anyway); no other rule file
    reads it."""
    reads = re.compile(r"\b(ANALYSIS|PLOT_METHOD|PLOT_RESIDUALISER|PLAN\.score|PLAN\.analysis)\b")
    wanted = set()
    for smk_file in sorted((REPO / "workflow/rules").glob("*.smk")):
        blocks = re.split(r"^rule (\w+):", smk_file.read_text(), flags=re.M)
        for name, body in zip(blocks[1::2], blocks[2::2]):
            params = body.split("params:", 1)[1].split("script:", 1)[0] if "params:" in body else ""
            if not reads.search(params):
                continue
            assert smk_file.name == "analyse.smk", f"{smk_file.name}: rule {name} reads the analysis block"
            if "rules.partial_correlations.output" not in body:
                wanted.add(name)
    assert wanted == set(ANALYSIS_RULES)


def test_a_copied_folder_whose_record_is_removed_is_taken_as_it_is(tmp_path, monkeypatch):
    """The way out the refusal gives when what differs changes no result."""
    copy = _copied_experiment(tmp_path, monkeypatch)
    config = dict(micro_config(), experiment="micro2")
    config["evaluation"] = dict(config["evaluation"], batch_size=7)
    plan = micro_plan(config)
    for p in copy.rglob("*.lock"):
        p.unlink()
    refusal = config_warning(plan, [tmp_path / "micro2.yaml"], config)
    assert "(evaluation)" in refusal and f"remove {plan.paths.root}/experiment.json" in refusal
    (copy / "experiment.json").unlink()
    assert config_warning(plan, [tmp_path / "micro2.yaml"], config) is None
    assert lock(plan, [tmp_path / "micro2.yaml"]) is None
    _release_experiment(copy)


@pytest.mark.slow
def test_a_copy_made_with_cp_al_runs_through_snakemake_with_the_same_command(tmp_path):
    """Through the Snakefile: the copy's run takes its lock files anew and runs; the original keeps its own."""
    cfg = micro_config()
    first = tmp_path / "micro.yaml"
    first.write_text(yaml.safe_dump(cfg))
    assert smk(tmp_path, first, "--until", "prepare_dataset", timeout=600).returncode == 0
    root = tmp_path / "results/micro"
    shutil.copytree(root, root.with_name("micro2"), copy_function=os.link)
    copy = tmp_path / "micro2.yaml"
    copy.write_text(yaml.safe_dump(dict(cfg, experiment="micro2")))
    res = smk(tmp_path, copy, "--until", "prepare_dataset", timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    assert (root / "experiment.lock").stat().st_nlink == 1 and (root.with_name("micro2") / "experiment.lock").exists()
