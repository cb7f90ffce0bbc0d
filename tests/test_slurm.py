"""profiles/slurm on a real (single-node) SLURM cluster, against a local run of the same config.

The cluster test needs root and apt (tests/slurm/cluster.py installs slurm-wlm and
munge when missing); it is skipped, with the reason, only where neither is available.
"""

import importlib.metadata
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from helpers import REPO, SNAKEMAKE

sys.path.insert(0, str(REPO / "tests" / "slurm"))
import cluster as slurm_cluster  # noqa: E402

PROFILE = REPO / "profiles/slurm/config.yaml"
PLUGINS = ("snakemake-executor-plugin-slurm", "snakemake-executor-plugin-slurm-jobstep")
R = "results/micro"


# ---- the profile itself (fast) ---------------------------------------------------------


def test_plugin_is_pinned_alike_and_installed():
    reqs = (REPO / "requirements.txt").read_text().splitlines()
    env = yaml.safe_load((REPO / "envs/oodcorr.yaml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    for name in PLUGINS:
        pins = [r for r in reqs if r.split("==")[0] == name]
        assert len(pins) == 1 and pins == [p for p in pip if p.split("==")[0] == name], name
        assert importlib.metadata.version(name) == pins[0].split("==")[1]
    assert importlib.metadata.version(PLUGINS[0]).startswith("2.")


def packing_block() -> dict:
    """The profile's optional PACKING block (commented out), as a user uncommenting it gets it."""
    text = PROFILE.read_text().split("# ---- PACKING", 1)[1].split("# ---- end of PACKING", 1)[0]
    keys = [line[2:] for line in text.splitlines() if re.match(r"# [a-z-]+: ", line)]
    return yaml.safe_load("\n".join(keys))


def test_profile_keys_a_user_edits_and_optional_packing():
    prof = yaml.safe_load(PROFILE.read_text())
    assert prof["executor"] == "slurm"
    # partition and account: one place, the profile's default resources
    assert {"slurm_partition", "slurm_account"} <= set(prof["default-resources"])
    # retries scale memory and time with the attempt
    assert prof["retries"] >= 1 and "attempt" in str(prof["default-resources"]["mem_mb"])
    # evaluations are a SLURM job each unless the user uncomments the packing block
    assert "group-components" not in prof and "groups" not in prof
    assert packing_block() == {
        "groups": {"evaluate": "evaluate"},
        "group-components": {"evaluate": 21},
        "set-resource-scopes": {"gpu": "local"},
        "resources": {"gpu": 1},
    }
    # GPUs come from the `gpu` resource: the plugin refuses --gres/--gpus in slurm_extra
    assert not re.search(r"--(gres|gpus)", yaml.safe_dump(prof))


def _dry_resources(tmp_path, resources: dict, target: str, rule: str, attempt: int, unit="checkpoint") -> dict:
    """mem_mb, runtime and attempt of ``rule``'s job for ``target`` in a dry run at ``attempt``."""
    cfg = yaml.safe_load((REPO / "config/micro.yaml").read_text())
    cfg["resources"] = resources
    cfg["evaluation"]["unit"] = unit
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    res = subprocess.run(
        [
            SNAKEMAKE,
            "-s",
            str(REPO / "Snakefile"),
            "-d",
            str(tmp_path),
            "--configfile",
            str(path),
            "-n",
            "--cores",
            "1",
            "--attempt",
            str(attempt),
            "--forceall",
            target,
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    block = res.stdout.split(f"rule {rule}:", 1)[1].split("\n\n", 1)[0]
    return {k: int(v) for k, v in re.findall(r"\b(mem_mb|runtime|attempt)=(\d+)", block)}


@pytest.mark.slow
@pytest.mark.parametrize("attempt", [1, 2])
def test_retry_scales_memory_and_runtime(tmp_path, attempt):
    """A second attempt asks for twice the memory and time (dry-run of one finetune job)."""
    got = _dry_resources(
        tmp_path,
        {"finetune": {"mem_mb": 3000, "runtime": 20}},
        "results/micro/finetune/micro-opt/synth/n64/seed0/manifest.json",
        "finetune",
        attempt,
    )
    assert got == {"mem_mb": 3000 * attempt, "runtime": 20 * attempt}


@pytest.mark.slow
@pytest.mark.parametrize("attempt", [1, 2])
@pytest.mark.parametrize("unit", ["checkpoint", "run"])
def test_evaluation_runtime_is_per_checkpoint_and_scales_with_the_attempt(tmp_path, attempt, unit):
    """The configured evaluate runtime is minutes per checkpoint: a unit-checkpoint job asks for
    it, a unit-run job (all 5 checkpoints of the micro run) for 5 times it; twice on attempt 2."""
    ev = "results/micro/eval/micro-opt/synth/n64/seed0"
    target = f"{ev}/step8/synth-overlap.predictions.parquet" if unit == "checkpoint" else f"{ev}/synth-overlap.json"
    got = _dry_resources(tmp_path, {"evaluate": {"runtime": 7, "mem_mb": 1500}}, target, "evaluate", attempt, unit)
    per_job = 1 if unit == "checkpoint" else 5
    assert got == {"mem_mb": 1500 * attempt, "runtime": per_job * 7 * attempt, "attempt": attempt}


# ---- the real cluster (minutes) -----------------------------------------------------------


def _config(path: Path) -> dict:
    """config/micro.yaml, evaluations declared as GPU jobs, and per-rule placement: every job that asks
    for no GPU (tiny-model build, tokenisation, this CPU finetune) to the CPU partition, the
    tokenisations with an extra sbatch option (resources: results do not change)."""
    cfg = yaml.safe_load((REPO / "config/micro.yaml").read_text())
    cfg["resources"] = {
        "evaluate": {"gpu": 1},
        "cpu": {"slurm_partition": slurm_cluster.CPU_PARTITION},
        "tokenize_testset": {"slurm_extra": "--nice=5"},
    }
    path.write_text(yaml.safe_dump(cfg))
    return cfg


def _test_profile(dest: Path) -> Path:
    """profiles/slurm with the edits docs/gpus-and-slurm.md#run-on-a-slurm-cluster tells a user to make,
    for this test cluster, and its PACKING block uncommented: 5 evaluation jobs (a run's checkpoints here)
    per SLURM job."""
    prof = yaml.safe_load(PROFILE.read_text())
    prof.update(packing_block())
    prof["group-components"] = {"evaluate": 5}
    prof["default-resources"]["slurm_partition"] = slurm_cluster.PARTITION
    del prof["default-resources"]["slurm_account"]
    prof.update(
        {
            "slurm-no-account": True,  # no accounts here
            "slurm-status-command": "squeue",  # no accounting: sacct knows no jobs
            "slurm-init-seconds-before-status-checks": 2,
            "slurm-keep-successful-logs": True,
            "cores": 4,
            "jobs": 20,
            "latency-wait": 10,
            "retries": 0,
            "verbose": True,
        }
    )
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "config.yaml").write_text(yaml.safe_dump(prof))
    return dest


def _results(wd: Path) -> tuple[pd.DataFrame, dict]:
    scores = pd.read_csv(wd / R / "scores.csv").sort_values(["run_id", "step", "testset"], ignore_index=True)
    preds = {p.relative_to(wd): pd.read_parquet(p) for p in sorted((wd / R / "eval").rglob("*.predictions.parquet"))}
    return scores, preds


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    try:
        slurm_cluster.ensure_installed()
    except slurm_cluster.Unavailable as e:
        pytest.skip(f"no SLURM test cluster on this machine: {e}")
    base = tmp_path_factory.mktemp("slurm")
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")

    # the reference: a local run, 2 simulated GPUs shared by GPU jobs through the device pool
    local = base / "local"
    local.mkdir()
    _config(local / "micro.yaml")
    t0 = time.time()
    cmd = [
        SNAKEMAKE,
        "-s",
        str(REPO / "Snakefile"),
        "-d",
        str(local),
        "--configfile",
        str(local / "micro.yaml"),
        "--cores",
        "2",
        "--resources",
        "gpu=2",
    ]
    local_env = dict(env, CUDA_VISIBLE_DEVICES="0,1", OODCORR_GPU_LOCK_DIR=str(base / "gpulocks"))
    # first everything the evaluations need, so that they are all ready at once and two
    # start side by side (2 cores, gpu=2)
    for extra in (["--until", "finetune", "tokenize_testset"], []):
        res = subprocess.run(cmd + extra, capture_output=True, text=True, timeout=900, env=local_env)
        assert res.returncode == 0, res.stderr[-5000:]
    local_s = time.time() - t0

    wd = base / "cluster-run"
    wd.mkdir()
    _config(wd / "micro.yaml")
    profile = _test_profile(base / "profile")
    # a short root: the munge socket path must fit a unix socket name
    root = Path(tempfile.mkdtemp(prefix="oodslurm-"))
    c = slurm_cluster.Cluster(root, gpus=8)
    try:
        c.start()
        t0 = time.time()
        smk = subprocess.run(
            [
                SNAKEMAKE,
                "-s",
                str(REPO / "Snakefile"),
                "-d",
                str(wd),
                "--configfile",
                str(wd / "micro.yaml"),
                "--workflow-profile",
                str(profile),
            ],
            capture_output=True,
            text=True,
            timeout=900,
            env=env,
        )
        slurm_s = time.time() - t0
        ctld_log = c.ctld_log.read_text(errors="replace")
        jobcomp = c.jobcomp_log.read_text(errors="replace") if c.jobcomp_log.exists() else ""
        pids = [p.pid for p in c.procs.values()]
    finally:
        c.stop()
    print(f"\nSLURM test cluster idle after {c.startup_s:.1f} s; local run {local_s:.0f} s; SLURM run {slurm_s:.0f} s")
    (base / "snakemake-slurm.log").write_text(smk.stdout + smk.stderr)  # kept for a failing assertion
    print(f"Snakemake's log of the SLURM run: {base / 'snakemake-slurm.log'}")
    assert smk.returncode == 0, (smk.stdout + smk.stderr)[-8000:] + ctld_log[-3000:]
    return {
        "local": local,
        "slurm": wd,
        "log": smk.stdout + smk.stderr,
        "ctld": ctld_log,
        "jobcomp": jobcomp,
        "pids": pids,
        "startup_s": c.startup_s,
    }


@pytest.mark.slow
def test_scores_through_slurm_equal_local(runs):
    s_local, p_local = _results(runs["local"])
    s_slurm, p_slurm = _results(runs["slurm"])
    assert len(s_slurm) == 5 * 3  # 5 checkpoints x (in-domain + 2 OOD)
    pd.testing.assert_frame_equal(s_slurm, s_local)
    assert sorted(p_slurm) == sorted(p_local) and len(p_slurm) == 15
    for k in p_local:  # every per-example prediction and logit, bit for bit
        pd.testing.assert_frame_equal(p_slurm[k], p_local[k])


@pytest.mark.slow
def test_jobs_went_through_slurm(runs):
    log = runs["log"]
    ids = re.findall(r"has been submitted with SLURM jobid (\d+)", log)
    # build + finetune + 3 tokenisations + the 15 evaluation jobs (5 checkpoints x 3 testsets)
    # packed 5 to a SLURM job by the profile's PACKING block
    assert len(ids) == len(set(ids)) == 8, log[-5000:]
    # slurmctld ran every one of them on the node and each exited 0. Read from the job completion
    # records (jobcomp/filetxt: one ``key=value`` line per finished job, written by slurmctld's
    # completion logger whichever scheduler started the job), not from slurmctld's log: a job
    # the main scheduler starts logs ``sched: Allocate JobId=N``, one the backfill scheduler starts
    # logs ``sched/backfill: _start_job: Started JobId=N`` (Slurm 22.05's job_scheduler.c and
    # backfill.c), and which one starts a job depends on timing (the old assertion on the first
    # line failed once under load).
    finished = slurm_cluster.job_records(runs["jobcomp"])
    for i in ids:
        assert i in finished, (i, runs["jobcomp"][-3000:])
        rec = finished[i]
        assert rec["JobState"] == "COMPLETED" and rec["ExitCode"] == "0:0", rec
        assert rec["NodeList"] == slurm_cluster.NODE, rec
    comments = re.findall(r"sbatch call: sbatch .*?--comment (\S+)", log)
    groups = re.findall(r"sbatch call: (sbatch .*?--comment rule_evaluate_evaluate .*)", log)
    assert len(groups) == 3, log[-5000:]
    packed = []
    for call in groups:
        jobs = re.findall(
            r"'evaluate:model=micro-opt,indomain=synth,ntrain=64,seed=0,step=(\d+),testset=([\w-]+)'", call
        )
        assert len(jobs) == 5, call
        packed += jobs
        # one GPU, the 5 jobs one after another: 5 x the default 10 minutes per checkpoint
        assert "--gpus=1" in call and "--cpus-per-task=1" in call and " -t 50 " in call, call
    assert sorted(packed) == sorted(
        (str(k), t) for k in (0, 4, 8, 12, 16) for t in ("synth-test", "synth-overlap", "synth-negation")
    )
    assert " -p oodtest " in log and " -A " not in log
    # per-rule placement from the config's resources: CPU-only jobs in the CPU partition, the GPU
    # jobs in the profile's; an extra sbatch option only where the config sets it
    placed, extra = {}, {}
    for call in re.findall(r"sbatch call: (sbatch .*)", log):
        rule = re.search(r"--comment rule_([a-z_]+?)(?:_wildcards_|_evaluate\b|\s)", call).group(1)
        placed.setdefault(rule, set()).add(re.search(r" -p (\S+)", call).group(1))
        extra.setdefault(rule, set()).add("--nice=5" in call)
    cpu = slurm_cluster.CPU_PARTITION
    assert placed == {
        "build_tiny_model": {cpu},
        "tokenize_testset": {cpu},
        "finetune": {cpu},
        "evaluate": {slurm_cluster.PARTITION},
    }, placed
    assert extra == {
        "build_tiny_model": {False},
        "tokenize_testset": {True},
        "finetune": {False},
        "evaluate": {False},
    }, extra
    # aggregation and plots stayed on the submitting node
    for rule in ("aggregate_scores", "partial_correlations", "heatmap", "prepare_dataset"):
        assert f"localrule {rule}:" in log and f"rule_{rule}" not in " ".join(comments), rule


@pytest.mark.slow
def test_cluster_daemons_are_gone(runs):
    assert runs["startup_s"] < 60
    for pid in runs["pids"]:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert (
        not (slurm_cluster.CONF_DIR / "slurm.conf").exists()
        or slurm_cluster.MARKER not in (slurm_cluster.CONF_DIR / "slurm.conf").read_text()
    )


@pytest.mark.slow
def test_local_gpu_jobs_spread_over_the_devices(runs):
    """In the local run (--resources gpu=2, two simulated devices) the 15 evaluation jobs,
    started two at a time, used both devices."""
    claimed = []
    for log in (runs["local"] / R / "logs/eval").rglob("*.log"):
        claimed += re.findall(r"claimed GPU (\S+) of 0,1", log.read_text())
    assert len(claimed) == 15 and set(claimed) == {"0", "1"}
