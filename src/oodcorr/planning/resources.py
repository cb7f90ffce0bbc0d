"""Each per-model rule's request for one model (:class:`Resources`), resolved through the config's layers
with the key that set each value (:func:`model_resources`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from ..core.defaults import RESOURCES
from .config import Experiment

# where a submitted job goes on a SLURM cluster: snakemake-executor-plugin-slurm's resource names
PLACEMENT = ("slurm_partition", "slurm_account", "qos", "constraint", "slurm_extra")


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

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any], origin: Mapping[str, str] | None = None) -> Resources:
        names = [f.name for f in fields(cls) if f.name != "origin"]
        return cls(**{k: values[k] for k in names if k in values}, origin=dict(origin or {}))

    def where(self, name: str) -> str:
        return self.origin.get(name, f"resources.<rule>.{name}")


def model_resources(exp: Experiment, config_entry: dict) -> dict[str, Resources]:
    """Per rule: the defaults, then each layer (``resources``, size class, the model's own); within a layer
    its ``default`` set, its ``cpu`` set (for a job without a GPU) and the rule's own keys, the last winning."""
    layers = exp.resource_layers(config_entry["name"])
    out = {}
    for rule, default in RESOURCES.items():
        values, origin = dict(default), {}
        gpu = values.get("gpu", 0)
        for _where, layer in layers:  # whether the job has a GPU decides if `cpu` applies
            own = layer.get(rule) or {}
            if "gpu" in own:
                gpu = own["gpu"]
        if rule == "finetune" and config_entry.get("distributed"):
            gpu = int(config_entry["distributed"]["gpus"])  # one process per GPU
        for where, layer in layers:
            for part in ("default", *(("cpu",) if not gpu else ()), rule):
                for key, value in (layer.get(part) or {}).items():
                    values[key], origin[key] = value, f"{where}.{part}.{key}"
        if rule == "finetune" and config_entry.get("distributed"):
            values["gpu"], origin["gpu"] = gpu, f"models[{config_entry['name']}].distributed.gpus"
        out[rule] = Resources.from_mapping(values, origin)
    return out
