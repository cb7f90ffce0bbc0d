"""What the rules get from a plan besides paths: callables carrying their parameters where Snakemake looks
first (:func:`rule_callable`), and each per-model rule's threads and resources (:class:`Resources`, resolved
through the config's layers with the key that set each value: :func:`model_resources`)."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..core.defaults import LOCAL_THREADS, RESOURCES


@dataclass(frozen=True)
class Resources:
    """What one job of a rule asks for (before retries scale memory and time), and where it goes."""

    gpu: int = 0
    gpu_model: str | None = None
    gpu_mem_gb: float | None = None  # memory of each GPU, GiB: planning checks the model fits (oodcorr.launch.sizing)
    mem_mb: int = 2000
    runtime: int = 30  # minutes
    threads: int = 1
    slurm_partition: str | None = None
    slurm_account: str | None = None
    qos: str | None = None
    constraint: str | None = None
    slurm_extra: str | None = None
    # resource name -> the config key that set it (for messages), e.g. "size_classes.30b.evaluate.gpu_mem_gb"
    origin: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)

    def where(self, name: str) -> str:
        return self.origin.get(name, f"resources.<rule>.{name}")


def model_resources(config: dict, config_entry: dict) -> dict[str, Resources]:
    """Per rule: the defaults, then each layer (``resources``, size class, the model's own); within a layer
    its ``default`` set, its ``cpu`` set (for a job without a GPU) and the rule's own keys, the last winning."""
    size_class = config_entry.get("size_class")
    layers = [("resources", config.get("resources") or {})]
    if size_class:
        layers.append((f"size_classes.{size_class}", config["size_classes"][size_class] or {}))
    layers.append((f"models[{config_entry['name']}].resources", config_entry.get("resources") or {}))
    out = {}
    for rule, default in RESOURCES.items():
        values, origin = dict(default), {}
        # whether the job has a GPU (the last layer that sets it) decides if `cpu` applies
        own = [layer[rule]["gpu"] for _, layer in layers if "gpu" in (layer.get(rule) or {})]
        gpu = own[-1] if own else values.get("gpu", 0)
        if rule == "finetune" and config_entry.get("distributed"):
            gpu = int(config_entry["distributed"]["gpus"])  # one process per GPU
        for where, layer in layers:
            for part in ("default", *(("cpu",) if not gpu else ()), rule):
                for key, value in (layer.get(part) or {}).items():
                    values[key], origin[key] = value, f"{where}.{part}.{key}"
        if rule == "finetune" and config_entry.get("distributed"):
            values["gpu"], origin["gpu"] = gpu, f"models[{config_entry['name']}].distributed.gpus"
        out[rule] = Resources(**values, origin=origin)  # the schema allows these keys alone
    return out


# Snakemake reads a callable's parameters many times per job while it plans; it looks first for this
# attribute (snakemake.common.FUNC_OVERWRITE_PARAMS_ATTR; a test checks the name)
SNAKEMAKE_PARAMS_ATTR = "_overwrite_params"


def rule_callable(func: Callable) -> Callable:
    """``func`` with its parameters (after ``self`` on a method) stored where Snakemake looks first."""
    params = dict(inspect.signature(func).parameters)
    if next(iter(params), None) == "self":
        del params["self"]
    setattr(func, SNAKEMAKE_PARAMS_ATTR, params)
    return func


def rule_threads(models: Mapping[str, Any], rule: str):
    """Threads of a rule's jobs: a constant when every model agrees, else a callable."""
    if rule in LOCAL_THREADS:
        return LOCAL_THREADS[rule]
    return _per_model({m: spec.resources[rule].threads for m, spec in models.items()})


def _per_model(values: dict[str, Any]):
    """One value when every model has it, else a callable of a job's wildcards."""
    if len(set(values.values())) == 1:
        return next(iter(values.values()))
    return rule_callable(lambda wildcards: values[wildcards.model])


def rule_resources(models: Mapping[str, Any], rule: str, steps: Callable[[Any], int] | None = None) -> dict[str, Any]:
    """Snakemake ``resources`` of a per-model rule: memory and runtime times the attempt (evaluate's runtime
    times ``steps(wildcards)`` where given), and for evaluate ``attempt`` (its batch size halves on retries)."""
    per = {m: spec.resources[rule] for m, spec in models.items()}
    out: dict[str, Any] = {"gpu": _per_model({m: r.gpu for m, r in per.items()})}
    if any(r.gpu_model and r.gpu for r in per.values()):
        gpu_models = {m: (r.gpu_model if r.gpu else None) for m, r in per.items()}
        out["gpu_model"] = rule_callable(lambda wildcards: gpu_models[wildcards.model])
    # where a job goes on SLURM (snakemake-executor-plugin-slurm's names), only where the config sets it (else the
    # profile's default-resources apply)
    for key in ("slurm_partition", "slurm_account", "qos", "constraint", "slurm_extra"):
        if any(getattr(r, key) is not None for r in per.values()):
            out[key] = _per_model({m: getattr(r, key) for m, r in per.items()})
    out["mem_mb"] = rule_callable(lambda wildcards, attempt: per[wildcards.model].mem_mb * attempt)
    times = steps if rule == "evaluate" and steps is not None else (lambda wildcards: 1)
    out["runtime"] = rule_callable(lambda wildcards, attempt: per[wildcards.model].runtime * times(wildcards) * attempt)
    if rule == "evaluate":  # Snakemake's attempt, as a resource (a param would rerun finished jobs)
        out["attempt"] = rule_callable(lambda wildcards, attempt: attempt)
    return out
