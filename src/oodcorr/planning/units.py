"""The units a plan is made of: a resolved model (:class:`ModelSpec`), a finetuning run (:class:`Run`) with
its checkpoint schedule, an evaluation job (:class:`EvalJob`)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..core.errors import ConfigError
from ..core.model_entry import ModelEntry
from .resources import Resources


@dataclass(frozen=True)
class ModelSpec:
    """A model entry resolved against the global config's blocks."""

    name: str
    model_entry: ModelEntry  # the entry minus what changes no result (Experiment.model_entry)
    finetune: dict  # the finetune settings of its runs (global block with its overrides), no n_train/seeds
    prompt: dict | None  # None for methods that read no prompt
    distributed: dict | None
    resources: Mapping[str, Resources]  # per rule in MODEL_RULES
    checkpoints: Mapping[int, dict] | None = None  # series only: x value -> {"path"} or {"hub", "revision"}
    x_unit: str = "step"  # what the x-axis counts: step (finetuned, or a series' steps) or tokens
    params_b: float | None = None  # the entry's parameter count for planning (oodcorr.launch.sizing), if given

    @property
    def lora(self) -> bool:
        return bool(self.finetune.get("lora"))


@dataclass(frozen=True)
class Run:
    """One finetuning run: model x in-domain set x n_train x data seed."""

    model: str
    in_domain: str
    n_train: int
    seed: int
    steps: tuple[int, ...]  # checkpoints saved and evaluated, 0 (the start) first; a series' x values
    max_steps: int
    series: bool = False  # the model's checkpoints are given (no finetune job), n_train and seed are 0

    @property
    def id(self) -> str:
        return f"{self.model}/{self.in_domain}/n{self.n_train}/seed{self.seed}"

    @property
    def wildcards(self) -> dict[str, str]:
        return {"model": self.model, "indomain": self.in_domain, "ntrain": str(self.n_train), "seed": str(self.seed)}


@dataclass(frozen=True)
class EvalJob:
    """One evaluation job: a run's checkpoints ``steps`` scored on one testset."""

    run: Run
    testset: str
    role: str  # in-domain | ood
    steps: tuple[int, ...]


def checkpoint_steps(ft: Mapping[str, Any], max_steps: int, where: str) -> tuple[int, ...]:
    """Steps at which a run is saved and evaluated, step 0 (the start) included."""
    sched = ft["checkpoints"]
    if "steps" in sched:
        steps = [int(s) for s in sched["steps"]]
        if any(b <= a for a, b in zip(steps, steps[1:])):
            raise ConfigError(f"{where}: steps must be strictly increasing, got {steps}")
        if steps and steps[-1] > max_steps:
            raise ConfigError(f"{where}: step {steps[-1]} is beyond the run's {max_steps} training steps")
    else:
        every = int(sched["every"])
        steps = list(range(every, max_steps + 1, every))
        if not steps or steps[-1] != max_steps:
            steps.append(max_steps)
    if not steps or steps[0] != 0:
        steps = [0] + steps
    return tuple(steps)


def run_length(ft: Mapping[str, Any], n_train: int, model: str) -> int:
    """Optimizer steps of a run: ``max_steps``, or ``epochs`` over ``n_train`` examples."""
    if ft.get("max_steps"):
        return int(ft["max_steps"])
    if not ft.get("epochs"):
        raise ConfigError(f"finetune (model {model}): give max_steps or epochs")
    per_step = ft["batch_size"] * ft.get("gradient_accumulation_steps", 1)
    return int(math.ceil(n_train / per_step) * ft["epochs"])
