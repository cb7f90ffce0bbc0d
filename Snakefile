# oodcorr: do out-of-distribution results generalise?
# Finetune -> evaluate every checkpoint on every testset -> partial correlations.
# The logic lives in src/oodcorr; the plan (oodcorr.planning.plan) enumerates the jobs, and the
# rules below only wire its paths, params and resources together.
import os
import sys
from pathlib import Path

from snakemake.utils import min_version

min_version("9.0")

# kept though `make` installs the package: envs/oodcorr.yaml does not, so with --sdm conda both
# this process and its jobs import it from src/
SRC = str(Path(workflow.basedir) / "src")
sys.path.insert(0, SRC)
os.environ.update(PYTHONPATH=os.pathsep.join(p for p in (SRC, os.environ.get("PYTHONPATH", "")) if p))

from oodcorr.core.io import load_yaml  # noqa: E402
from oodcorr.core.records import REFUSALS_ENV, clear_refusals, refusals_dir  # noqa: E402
from oodcorr.planning.config import NAME_RE, check_trackers  # noqa: E402
from oodcorr.launch.disk_checks import check_on_disk, check_tokenized_caches, end_of_run_report  # noqa: E402
from oodcorr.launch.room import room_to_run  # noqa: E402
from oodcorr.launch.experiment import (
    check_published,
    claim,
    config_warning,
    lock,
    record_provenance,
    unlink_copied_locks,
    writes,
)  # noqa: E402
from oodcorr.modeling.hub import use_lock  # noqa: E402
from oodcorr.planning.plan import load  # noqa: E402
from oodcorr.launch.report import check_report_inputs, report_requested  # noqa: E402
from oodcorr.launch.sizing import check_gpu_memory  # noqa: E402
from oodcorr.launch.slurm_rerun import before_planning, earlier_jobs_warning  # noqa: E402
from oodcorr.launch.slurm_watch import at_start, end_lines, executor_name, say  # noqa: E402

# The embedded default, unless the user gives their own with --configfile: configs
# are complete on their own (schema defaults fill the rest), never merged with it.
if not workflow.overwrite_configfiles:
    # read by us first (oodcorr.core.io.load_yaml), so that a YAML slip in an edited default (a tab,
    # a bad indent) is named with its line and column; Snakemake's own reader names neither. A file
    # given with --configfile is read by Snakemake before this file runs: `oodcorr budget
    # --configfile <file>` names the line there (docs/troubleshooting.md)
    load_yaml(Path(workflow.basedir) / "config/config.yaml")

    # by its full path: `snakemake -d <elsewhere>` finds it too
    configfile: str(Path(workflow.basedir) / "config/config.yaml")


CONFIG_FILES = workflow.overwrite_configfiles or [Path(workflow.basedir) / "config/config.yaml"]
# The one entry point (oodcorr.planning.plan.load): names the experiment after its file unless it says
# `experiment:` (my-grid.yaml -> results/my-grid/), checks the schema naming every offending key
# with its file and line, fills the schema's defaults and the analysis defaults (oodcorr.core.defaults)
# into `config`, runs the checks of the config alone (oodcorr.planning.checks).
PLAN = load(config, workflow.basedir, CONFIG_FILES)
# what the config points at and what earlier runs left (tokenizers, data files, summaries)
_disk_warnings = check_on_disk(PLAN)
# the hub lock beside the config (`oodcorr prefetch`): checked against the plan and this machine's
# cache; with it every job loads the locked commits, offline
HUB_LOCK, _hub_warnings = use_lock(config, CONFIG_FILES[-1], PLAN)
# every GPU job's model fits its GPUs' memory (gpu_mem_gb), where the parameter count is known
_fit_warnings = check_gpu_memory(PLAN, HUB_LOCK)
# in the main process only (a cluster job plans again on its node): another config wrote this
# experiment last; the published files no longer match their record (then it is published again)
_experiment_warnings = []
if workflow.is_main_process:
    # the experiment trackers finetune.report_to names: installed and reachable from here, before any job
    check_trackers(config, PLAN.paths.root)
    # room on the file systems the run writes in besides what its jobs check before writing: a full (or
    # inode-less) TMPDIR kills Snakemake's scheduler with a traceback once jobs are ready, so it is checked
    # now, with the experiment folder, .snakemake/, --shadow-prefix, the conda prefix and the lock folders
    _deploy = workflow.deployment_settings
    _conda = any(getattr(m, "name", "").lower() == "conda" for m in _deploy.deployment_method)
    _no_room = room_to_run(PLAN, sys.argv, conda_prefix=_deploy.conda_prefix if _conda else None)
    if _no_room and (writes(sys.argv) or report_requested(sys.argv)):
        for _line in _no_room:
            print(f"oodcorr: {_line}", file=sys.stderr)
        sys.exit(1)
    _experiment_warnings = _no_room + [w for w in [config_warning(PLAN, CONFIG_FILES, config)] if w]
    # a run that may write holds its experiment folder's lock from here to its end
    # (oodcorr.launch.experiment.lock): a second writer of that folder stops now, naming this one,
    # before Snakemake builds its DAG or starts any job, even from another checkout whose results/
    # is the same folder or one that got past Snakemake's own lock on a slow shared file system
    # (lock files that are hard links, the folder copied with `cp -al`: this folder's names of them removed
    # first where no run holds them, said in one line; oodcorr.launch.experiment.unlink_copied_locks)
    _experiment_warnings += unlink_copied_locks(PLAN) if writes(sys.argv) else []
    _refusal = lock(PLAN, CONFIG_FILES) if writes(sys.argv) else None
    if _refusal:
        for _warning in _experiment_warnings:  # another config wrote it last: said too
            print(f"oodcorr warning: {_warning}", file=sys.stderr)
        print(f"oodcorr: {_refusal}", file=sys.stderr)
        sys.exit(1)
    # a rerun after the submitting Snakemake died (oodcorr.launch.slurm_rerun): the Snakemake lock it left
    # (--unlock, said with why), and the jobs of its that SLURM still holds, waited for here instead of
    # being submitted again
    _refusal = before_planning(PLAN, sys.argv, say) if writes(sys.argv) else None
    if _refusal:
        print(f"oodcorr: {_refusal}", file=sys.stderr)
        sys.exit(1)
    if not writes(sys.argv):
        _experiment_warnings += earlier_jobs_warning(PLAN)
    # the published set against its record: one not as published is published again; a run that only looks
    # (a dry run, a summary, a graph, --report) changes nothing in results/ and says what a run would do
    _experiment_warnings += check_published(PLAN, change=writes(sys.argv))
    # tokenised testsets cut short or made by another tokenizer: deleted (in a run that may write),
    # so that this run makes them again before any evaluation reads them
    _experiment_warnings += check_tokenized_caches(PLAN, rebuild=writes(sys.argv))
for _warning in (*PLAN.warnings, *_disk_warnings, *_hub_warnings, *_fit_warnings, *_experiment_warnings):
    print(f"oodcorr warning: {_warning}", file=sys.stderr)
# `snakemake --report`: it reports the experiment of the config given (with --configfile); say so
# at once when that experiment has not run, instead of a line per missing file and a failure
check_report_inputs(PLAN, CONFIG_FILES[-1], sys.argv)
P = PLAN.paths
LOGS = P.logs
# where each job records the sentence it stops with (oodcorr.launch.runtime.refuse), repeated on the
# console when the run ends (onerror); set in every process, so a cluster job's script finds it too
os.environ[REFUSALS_ENV] = str(refusals_dir(LOGS).resolve())
A = P.staged(P.analysis)  # where the analysis and the report's figures are written, then published
# the rules' conda environments (docs/development.md#environments; paths relative to workflow/rules/, where
# the rules live): the rules that make or read models, and those upstream of them, in the full one; the
# rules after the evaluations (aggregation, analysis, figures, publishing, the report) in one without torch,
# transformers or peft
MODEL_ENV = "../../envs/oodcorr.yaml"
ANALYSIS_ENV = "../../envs/analysis.yaml"
# a model, dataset or testset name as the config checks it (oodcorr.planning.config.NAME_RE), unanchored
NAME = NAME_RE.pattern.removeprefix("^").removesuffix("$")


wildcard_constraints:
    model=NAME,
    indomain=NAME,
    dataset=NAME,
    testset=NAME,
    ntrain=r"\d+",
    seed=r"\d+",
    step=r"\d+",


include: "workflow/rules/data.smk"
include: "workflow/rules/finetune.smk"
include: "workflow/rules/evaluate.smk"
include: "workflow/rules/analyse.smk"
include: "workflow/rules/report.smk"


localrules:
    all,


# A real run with jobs to run: the experiment's lock (held since planning) and the record of this
# run's config (oodcorr.launch.experiment.claim)
onstart:
    _refusal = claim(PLAN, CONFIG_FILES, config)
    # on SLURM (oodcorr.launch.slurm_watch): what the jobs would be submitted to, checked against the
    # cluster (partition, account, status command, queue limit) before anything is; then the jobs watched
    _refusal = _refusal or at_start(workflow, PLAN)
    if _refusal:
        print(f"oodcorr: {_refusal}", file=sys.stderr)
        sys.exit(1)
    # the refusals of earlier runs: only this run's are repeated when it ends
    clear_refusals(refusals_dir(LOGS))


rule all:
    default_target: True
    input:
        # the record of the published set (scores, tables, figures: links into results/<experiment>/.published/)
        P.published,
        # asked for directly, not only through their consumers: Snakemake does not rebuild a
        # missing file whose consumers are up to date, so a deleted predictions file (or unit-run
        # summary) would stay gone and the analysis that reads it fail later, and the staging
        # outputs of a failed analysis step (deleted by Snakemake) would never be made again
        PLAN.staged_targets(),
        PLAN.eval_outputs(),


# everything allowed but suspicious (a testset with one class, prompts cut short, ...), once, then
# where the published results are; after a failure, last, a file system without room now and the
# sentence each job stopped with, the job named (a full disk while tokenising, converting,
# aggregating, publishing...); end_of_run_report never raises (an unreadable file is a line)
onsuccess:
    # the experiment's record names the libraries of the scores this run published (provenance.json)
    for _warning in [w for w in [record_provenance(PLAN)] if w]:
        print(f"oodcorr warning: {_warning}", file=sys.stderr)
    # a run asked for some files (or --until) instead of the published set: it is told what it made
    _ds, _jobs = workflow.dag_settings, workflow.dag.targetjobs
    _whole = any(j.rule.name in ("all", "publish_results") for j in _jobs) and not _ds.until
    _asked = None if _whole else sorted(_ds.targets) or sorted(_ds.until) or sorted({j.rule.name for j in _jobs})
    for line in end_of_run_report(PLAN, failed=False, asked=_asked) + end_lines(failed=False):
        print(line, flush=True)


# (on SLURM, last: each job SLURM ended for its time or memory limit, a node failure, a preemption or a
# cancel, with the rule and the config key that set the limit: oodcorr.launch.slurm_watch.end_lines)
onerror:
    _local = executor_name(workflow) == "local"  # a job killed on this machine is named (SLURM's: end_lines)
    for line in end_of_run_report(PLAN, failed=True, local=_local) + end_lines(failed=True):
        print(line, flush=True)
