"""oodcorr budget: the paper grid's costs against a hand computation, and job counts against Snakemake."""

import json
import re

import pytest
import yaml

from oodcorr.cli import main
from oodcorr.core.records import job_seconds
from oodcorr.launch import budget
from oodcorr.planning.plan import MODEL_RULES, load
from oodcorr.planning.schema import read_config

from helpers import REPO, micro_config, planned_jobs

PAPER = REPO / "config/paper.yaml"


@pytest.fixture(scope="module")
def paper_plan():
    return load(read_config(PAPER), REPO, [PAPER])


def test_paper_budget_printed_and_checked_by_hand(tmp_path, capsys):
    out = tmp_path / "paper-budget"
    assert (
        main(
            [
                "budget",
                "--configfile",
                str(PAPER),
                "--profile",
                str(REPO / "profiles/slurm"),
                "--gpus",
                "64",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert printed == (tmp_path / "paper-budget.md").read_text()
    b = json.loads((tmp_path / "paper-budget.json").read_text())
    rules = {r["rule"]: r for r in b["rules"]}

    # By hand. 8 models x 2 in-domain sets x 2 n_train x 3 seeds = 96 runs; 1000 steps, a checkpoint
    # every 50 plus step 0: 21 checkpoints; each run evaluated on 8 testsets (its in-domain test set
    # and 7 OOD sets): 96 x 21 x 8 = 16,128 evaluation jobs. 10 datasets (2 training pools + 8 test
    # sets); 8 models x 8 testsets = 64 tokenisations.
    assert {r: rules[r]["jobs"] for r in ("prepare_dataset", "tokenize_testset", "finetune", "evaluate")} == {
        "prepare_dataset": 10,
        "tokenize_testset": 64,
        "finetune": 96,
        "evaluate": 16128,
    }
    assert rules["prepare_dataset"]["submitted"] == 0 and rules["evaluate"]["submitted"] == 16128
    # Finetune GPU-hours: 12 runs per model; two models per size class:
    #   3b 1 GPU x 4 h, 7b 1 x 8 h, 13b 1 x 12 h, 30b 2 x 24 h -> 12 x 2 x (4 + 8 + 12 + 48) = 1,728
    assert rules["finetune"]["gpu_hours"] == 1728.0 and rules["finetune"]["gpus_per_job"] == [1, 2]
    # Evaluate: 12 runs x 21 checkpoints x 8 testsets = 2,016 jobs per model, 1 GPU each, at
    #   6, 8, 12, 20 minutes per class -> 2,016 x 2 x (6 + 8 + 12 + 20) / 60 = 3,091.2
    assert rules["evaluate"]["gpu_hours"] == 3091.2
    assert b["totals"]["gpu_hours"] == 4819.2 == b["totals"]["gpu_hours_expected"]  # nothing measured yet
    # Tokenisation: 64 CPU jobs x 30 min x 1 thread = 32 core-hours
    assert rules["tokenize_testset"]["cpu_core_hours"] == 32.0 and rules["tokenize_testset"]["gpus_per_job"] == [0]
    # Longest path: a 30b run, its 24 h finetune then one 20-minute evaluation job = 1,460 minutes;
    # on 64 GPUs at least 4,819.2 / 64 = 75.3 h
    assert b["longest_path_min"] == 1460 and b["longest_path_run"].startswith(("opt-30b/", "olmo2-32b/"))
    assert b["wall_hours_at_least"] == pytest.approx(4819.2 / 64)
    # LoRA adapters need the layer shapes, downloads the lock: both unknown before prefetch, and said so
    assert b["checkpoint_bytes"] is None and b["download_bytes"] is None
    assert all("oodcorr prefetch" in n for n in b["checkpoint_notes"])
    assert re.search(r"\| finetune \| 96 \| 96 \| 1/2 \| 1,728\.0 \| 1,728\.0 \| 0 \| 0\.0 \| gpu \|", printed)
    assert re.search(r"\| \*\*total\*\* \| \*\*16,340\*\* \| \*\*16,288\*\* \| \| \*\*4,819\.2\*\*", printed)
    assert "**Longest path**: 24.3 h (1,460 min" in printed and "**Wall time on 64 GPUs**: at least 75.3 h" in printed
    # the profile's one partition takes the CPU-only tokenisation too: the budget says how to move it
    assert "the 64 tokenize_testset jobs ask for no GPU but go to partition gpu" in printed
    assert "resources.cpu.slurm_partition" in printed


def test_packing_and_a_cpu_partition_change_the_submissions(paper_plan):
    prof = budget.read_profile(REPO / "profiles/slurm")
    prof.update(groups={"evaluate": "evaluate"}, group_components={"evaluate": 21})
    cfg = read_config(PAPER)
    cfg["resources"] = {"cpu": {"slurm_partition": "cpu"}}
    b = budget.compute(load(cfg, REPO, [PAPER]), profile=prof)
    rules = {r.rule: r for r in b.rules}
    assert rules["evaluate"].submitted == 16128 // 21 == 768 and rules["evaluate"].gpu_hours == 3091.2
    assert rules["tokenize_testset"].partitions == ["cpu"] and rules["finetune"].partitions == ["gpu"]
    assert not any("ask for no GPU" in n for n in b.notes)


def test_job_arrays_change_the_submissions_within_bounds_counted_by_hand(paper_plan):
    """The profile's ARRAYS block (`slurm-array-jobs: evaluate`). By hand: 96 runs x 8 testsets = 768 arrays at
    most (one per run x testset, 21 tasks each); one per run (168 tasks) = 96; at least each model's 2,016
    evaluations at once in arrays of up to 1,000: 8 x 3 = 24. The 8 models ask for 4 different evaluate
    resources (size classes), which arrays cannot mix: said."""
    prof = budget.read_profile(REPO / "profiles/slurm")
    assert prof["array_jobs"] is None  # commented out as shipped
    b = budget.compute(paper_plan, profile=prof)
    ev = next(r for r in b.rules if r.rule == "evaluate")
    (note,) = [n for n in b.notes if "ARRAYS" in n]
    assert ev.submitted == 16128 and "commented out here" in note
    assert "at most 768 SLURM submissions (one per run x testset), 96 where every testset is tokenised" in note
    assert "at least 24; 16,128 without arrays" in note and "4 different resources (per model)" in note

    prof.update(array_jobs="evaluate")
    b = budget.compute(paper_plan, profile=prof)
    assert next(r for r in b.rules if r.rule == "evaluate").submitted == 768
    assert budget.array_submissions(paper_plan, 100) == {
        "limit": 100,
        "jobs": 16128,
        "at_most": 768,
        "one_per_run": 96 * 2,  # 168 tasks: two arrays a run
        "at_least": 8 * 21,  # 2,016 a model: 21 arrays
        "resource_sets": 4,
    }
    # grouped jobs are never arrays: with PACKING the count is PACKING's
    prof.update(groups={"evaluate": "evaluate"}, group_components={"evaluate": 21})
    b = budget.compute(paper_plan, profile=prof)
    assert next(r for r in b.rules if r.rule == "evaluate").submitted == 768
    assert any("grouped jobs are never arrays" in n for n in b.notes)


def test_measured_gpu_costs_replace_the_limits_of_the_same_model_and_testset(paper_plan):
    # opt-2.7b evaluated on HANS took 90 s per checkpoint on a GPU; on RTE only on a CPU
    measured = {
        ("evaluate", "opt-2.7b", "hans", "gpu"): 90.0,
        ("evaluate", "opt-2.7b", "rte", "cpu"): 5.0,
        ("finetune", "smollm3-3b", None, "gpu"): 3600.0,
    }
    b = budget.compute(paper_plan, measured=measured)
    rules = {r.rule: r for r in b.rules}
    # 12 runs x 21 checkpoints = 252 HANS jobs of opt-2.7b: 252 x 90 s = 6.3 h instead of 252 x 6 min = 25.2 h
    assert rules["evaluate"].measured_jobs == 252
    assert rules["evaluate"].gpu_hours_expected == pytest.approx(3091.2 - 25.2 + 6.3)
    # 12 smollm3 runs: 1 h each measured instead of the 4 h limit
    assert rules["finetune"].measured_jobs == 12
    assert rules["finetune"].gpu_hours_expected == pytest.approx(1728 - 12 * 4 + 12 * 1)
    assert rules["evaluate"].gpu_hours == 3091.2  # the limits stay what they are


@pytest.mark.parametrize("unit", ["checkpoint", "run"])
def test_job_counts_equal_snakemakes(tmp_path, unit):
    cfg = micro_config()
    cfg["evaluation"]["unit"] = unit
    cfg["models"].append(dict(cfg["models"][0], name="micro-b", finetune={"checkpoints": {"steps": [4, 8, 16]}}))
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    table = {k: v for k, v in planned_jobs(tmp_path, path).items() if k != "total"}
    assert budget.job_counts(load(read_config(path), REPO, [path])) == table


def test_the_budget_knows_every_local_rule_and_counts_every_rule(tmp_path):
    """The budget counts the jobs of the rules with resources (MODEL_RULES) as submitted, the rest as run on
    the submitting node (it reads no Snakefile): the rule files' `localrules:` lists must name exactly those
    rest, and a dry run's jobs per rule must equal the budget's count of each."""
    text = (REPO / "Snakefile").read_text() + "".join(p.read_text() for p in (REPO / "workflow/rules").glob("*.smk"))
    declared = set()
    for block in re.findall(r"^localrules:\n((?:    \w+,\n)+)", text, re.M):
        declared |= set(re.findall(r"\w+", block))
    assert declared == set(re.findall(r"^rule (\w+):", text, re.M)) - set(MODEL_RULES)
    plan = load(read_config(REPO / "config/config.yaml"), REPO, [REPO / "config/config.yaml"])
    counts = budget.job_counts(plan)
    planned = planned_jobs(tmp_path, REPO / "config/config.yaml")
    assert counts == {k: v for k, v in planned.items() if k != "total"}
    assert counts["consensus_heatmap"] == 1


def test_an_evaluations_measured_seconds_count_its_jobs_stages_once_and_its_moments_never():
    """`ready` and `first_batch` are moments since the job's process started (issue 24), overlapping
    its start-up stages: summed with them, a measured evaluation cost about twice its start-up."""
    stages = {"model": 0.1, "forward": 0.5, "write": 0.05}
    job = {"startup": 0.1, "imports": 1.0, "cache": 0.02, "ready": 1.2, "first_batch": 1.25}
    assert job_seconds({"load": "fresh", "timing_s": stages, "job_timing_s": job}) == pytest.approx(0.65 + 1.12)
    assert job_seconds({"load": "in place", "timing_s": stages, "job_timing_s": job}) == pytest.approx(0.65)
