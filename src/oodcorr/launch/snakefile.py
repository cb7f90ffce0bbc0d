"""What the Snakefile runs in its own process, around the rules: one call each (:func:`plan_run` before
any rule, :func:`on_start`, :func:`on_success`, :func:`on_error`). A run that only looks (``-n``,
``--summary``, ``--dag``, ``--report``) changes nothing in ``results/``. A refusal is printed as
``oodcorr: <sentence>`` and ends the process with status 1, before any job.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from ..core.refusals import REFUSALS_ENV, clear_refusals, refusals_dir
from ..modeling.hub import use_lock
from ..planning.config import check_trackers
from ..planning.plan import Plan, load
from . import slurm_watch
from .disk_checks import check_on_disk, check_tokenized_caches, end_of_run_report
from .experiment import config_warning, lock, lock_and_record, may_write, record_provenance
from .free_space import free_space_problems, option_value
from .published_check import check_published, check_report_inputs
from .sizing import check_gpu_memory
from .slurm_rerun import before_planning, earlier_jobs_warning


def config_files(workflow) -> list[Path]:
    """The config files of this run: those given with ``--configfile``, else the embedded default."""
    return [Path(f) for f in workflow.overwrite_configfiles] or [Path(workflow.basedir) / "config/config.yaml"]


def plan_run(workflow, config: dict) -> Plan:
    """The plan of this run once every check that must pass before Snakemake builds its DAG has passed, in
    the order a person fixes them (a cluster job plans again on its node, without the main process's)."""
    files = config_files(workflow)
    plan = load(config, workflow.basedir, files)
    warnings = [*plan.warnings, *check_on_disk(plan)]
    # with a hub lock every job loads the locked commits, offline (its environment says so)
    hub_lock, hub_warnings = use_lock(config, files[-1], plan)
    warnings += hub_warnings + check_gpu_memory(plan, hub_lock)
    if workflow.is_main_process:  # the checks of the submitting process
        check_trackers(config, plan.paths.root)
        deploy = workflow.deployment_settings
        conda = any(getattr(m, "name", "").lower() == "conda" for m in deploy.deployment_method)
        no_room = free_space_problems(plan, sys.argv, conda_prefix=deploy.conda_prefix if conda else None)
        writing = may_write(sys.argv)
        if no_room and (writing or option_value(sys.argv, "--report", "") is not None):
            _stop(no_room)
        said = no_room + [w for w in [config_warning(plan, files, config)] if w]
        refusal = lock(plan, files) if writing else None
        if refusal:
            _warn(said)  # another config wrote it last: said too
            _stop([refusal])
        refusal = before_planning(plan, sys.argv, slurm_watch.print_now) if writing else None
        if refusal:
            _stop([refusal])
        warnings += said
        if not writing:
            warnings += earlier_jobs_warning(plan)
        warnings += check_published(plan, change=writing)
        warnings += check_tokenized_caches(plan, rebuild=writing)
    _warn(warnings)
    check_report_inputs(plan, files[-1], sys.argv)
    # where each job records the sentence it stops with (oodcorr.launch.runtime.refuse), repeated when the
    # run ends; set in every process, so that a cluster job's script finds it too
    os.environ[REFUSALS_ENV] = str(refusals_dir(plan.paths.logs).resolve())
    return plan


def on_start(workflow, plan: Plan, config: dict) -> None:
    """A run with jobs to run: its config recorded, the SLURM cluster checked, earlier runs' refusals cleared."""
    refusal = lock_and_record(plan, config_files(workflow), config) or slurm_watch.at_start(workflow, plan)
    if refusal:
        _stop([refusal])
    clear_refusals(refusals_dir(plan.paths.logs))


def on_success(workflow, plan: Plan) -> None:
    """The provenance of what was published, then what the run made and its warnings, last."""
    _warn([w for w in [record_provenance(plan)] if w])
    settings, jobs = workflow.dag_settings, workflow.dag.targetjobs
    whole = any(j.rule.name in ("all", "publish_results") for j in jobs) and not settings.until
    asked = None if whole else sorted(settings.targets) or sorted(settings.until) or sorted({j.rule.name for j in jobs})
    for line in end_of_run_report(plan, failed=False, asked=asked) + slurm_watch.end_lines(failed=False):
        print(line, flush=True)


def on_error(workflow, plan: Plan) -> None:
    """Why the run stopped, last: each job's sentence, and on SLURM each job the cluster ended for a limit."""
    local = slurm_watch.executor_name(workflow) == "local"
    for line in end_of_run_report(plan, failed=True, local=local) + slurm_watch.end_lines(failed=True):
        print(line, flush=True)


def _warn(warnings: list[str]) -> None:
    for warning in warnings:
        print(f"oodcorr warning: {warning}", file=sys.stderr)


def _stop(sentences: list[str]) -> None:
    for sentence in sentences:
        print(f"oodcorr: {sentence}", file=sys.stderr)
    sys.exit(1)
