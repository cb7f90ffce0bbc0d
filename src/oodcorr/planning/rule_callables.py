"""What the rules get from a plan besides paths: callables that carry their parameters where Snakemake
looks first (:func:`rule_callable`), and each per-model rule's threads and resources
(:func:`rule_threads`, :func:`rule_resources`), which :class:`oodcorr.planning.plan.Plan` hands to the
rules (``PLAN.threads``, ``PLAN.rule_resources``).

A value every model shares is a constant: each callable costs Snakemake work per job while it plans
(benchmarks/README.md, section 3, measures the cost).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

from ..core.defaults import LOCAL_THREADS
from .resources import PLACEMENT

# Snakemake reads a callable's parameters (inspect.signature) each time it calls it, many times
# per job while it plans (benchmarks/README.md, section 3, measures the cost). It looks first for
# this attribute (snakemake.common.FUNC_OVERWRITE_PARAMS_ATTR; a test checks the name), so
# every callable the rules get carries its parameters, worked out once.
SNAKEMAKE_PARAMS_ATTR = "_overwrite_params"


def rule_callable(func: Callable) -> Callable:
    """``func`` with its parameters stored where Snakemake looks first. On a method, the
    parameters after ``self`` (a bound method reads its function's attributes)."""
    params = dict(inspect.signature(func).parameters)
    if next(iter(params), None) == "self":
        del params["self"]
    setattr(func, SNAKEMAKE_PARAMS_ATTR, params)
    return func


def rule_threads(models: Mapping[str, Any], rule: str):
    """Threads of a rule's jobs: a constant when every model agrees, else a callable; a local
    rule's from :data:`~oodcorr.core.defaults.LOCAL_THREADS`. ``models``: the plan's
    :class:`oodcorr.planning.units.ModelSpec` by name (their per-rule ``resources``)."""
    if rule in LOCAL_THREADS:
        return LOCAL_THREADS[rule]
    per = {m: spec.resources[rule].threads for m, spec in models.items()}
    if len(set(per.values())) == 1:
        return next(iter(per.values()))
    return rule_callable(lambda wildcards: per[wildcards.model])


def rule_resources(models: Mapping[str, Any], rule: str, steps: Callable[[Any], int] | None = None) -> dict[str, Any]:
    """Snakemake ``resources`` of a per-model rule: ``gpu``, ``gpu_model`` (when any model sets
    one), ``mem_mb`` and ``runtime`` (both times the attempt on retries; evaluate's runtime is
    per checkpoint, times the job's checkpoints: ``steps(wildcards)``, given in unit ``run``), and,
    for evaluate, ``attempt`` (the script halves its batch size on each retry). CPUs are the rule's
    :func:`rule_threads` (the SLURM executor asks for them as ``--cpus-per-task``)."""
    per = {m: spec.resources[rule] for m, spec in models.items()}

    def pick(name: str):
        values = {m: getattr(r, name) for m, r in per.items()}
        if len(set(values.values())) == 1:
            return next(iter(values.values()))
        return rule_callable(lambda wildcards: values[wildcards.model])

    out: dict[str, Any] = {"gpu": pick("gpu")}
    if any(r.gpu_model and r.gpu for r in per.values()):
        gpu_models = {m: (r.gpu_model if r.gpu else None) for m, r in per.items()}
        out["gpu_model"] = rule_callable(lambda wildcards: gpu_models[wildcards.model])
    # SLURM placement: only where the config sets it (else the profile's default-resources
    # apply); set for every model of the rule or for none (build_plan checks)
    for key in PLACEMENT:
        if any(getattr(r, key) is not None for r in per.values()):
            out[key] = pick(key)
    mem = {m: r.mem_mb for m, r in per.items()}
    out["mem_mb"] = rule_callable(lambda wildcards, attempt: mem[wildcards.model] * attempt)
    minutes = {m: r.runtime for m, r in per.items()}
    if rule == "evaluate" and steps is not None:
        out["runtime"] = rule_callable(lambda wildcards, attempt: minutes[wildcards.model] * steps(wildcards) * attempt)
    else:
        out["runtime"] = rule_callable(lambda wildcards, attempt: minutes[wildcards.model] * attempt)
    if rule == "evaluate":
        out["attempt"] = _attempt
    return out


@rule_callable
def _attempt(wildcards, attempt):
    """Snakemake's attempt (1, then 2, ... on --retries), as a resource the script reads.
    A resource, not a param: resources never make Snakemake rerun a finished job."""
    return attempt
