"""One finetune job as a typed object (:class:`FinetuneJob`) and the view of its ``finetune`` block the Trainer
reads (:class:`TrainingSettings`). The job keeps the planned dicts as they were: the run's identity and manifest
are made from them, so they stay byte-identical to those of runs trained before."""

from __future__ import annotations

import json
import math
from dataclasses import MISSING, dataclass, field, fields, replace
from pathlib import Path

from ..core.defaults import FINETUNE
from ..core.model_entry import ModelEntry


def trains_in_bf16(model_entry: ModelEntry, finetune: dict) -> bool:
    """bf16 mixed precision: for a bf16 model, or when ``finetune.bf16`` asks."""
    return model_entry.dtype == "bfloat16" or bool(finetune.get("bf16"))


@dataclass(frozen=True)
class TrainingSettings:
    """The ``finetune`` block as the Trainer reads it: types checked, defaults filled in."""

    batch_size: int  # examples per device per step
    learning_rate: float
    max_length: int  # prompt tokens kept

    gradient_accumulation_steps: int = 1
    weight_decay: float = 0.0
    warmup_ratio: float = 0.0  # of max_steps, rounded up to whole steps (warmup_steps)
    lr_scheduler: str = "linear"  # a transformers scheduler name
    max_grad_norm: float = 1.0

    bf16: bool = False  # bf16 mixed precision on a GPU (a bf16 model trains so regardless)
    loss: str = FINETUNE["loss"]  # "verbalisers" or "vocabulary" (oodcorr.jobs.finetune.training_loss)
    lora: dict | None = None  # LoRA adapters (oodcorr.jobs.finetune.apply_lora); None: full finetuning

    @classmethod
    def from_mapping(cls, finetune: dict) -> TrainingSettings:
        """From the plan's ``finetune`` block (schema-checked when planning); the keys planning read are passed over."""
        types = {f.name: f.type for f in fields(cls)}
        cast = {"int": int, "float": float}  # as annotated; the rest (bf16: true or false) as the schema checked it
        return cls(**{k: cast.get(types[k], lambda v: v)(v) for k, v in finetune.items() if k in types})

    def warmup_steps(self, max_steps: int) -> int:
        return int(math.ceil(self.warmup_ratio * max_steps))


@dataclass(frozen=True)
class FinetuneJob:
    """One run's finetuning: what is trained and how it runs; a bad ``finetune`` block fails when it is built."""

    model_spec: dict  # the model's entry as planned; read through `model_entry`
    built_model_dir: str | None  # Plan.built_model_dir
    train_path: Path  # the in-domain training set (JSONL)
    labels: tuple[str, ...]  # the label names, in the order of the model's outputs
    prompt: dict | None  # the prompt block (template, verbalisers); None for a head model
    finetune: dict  # the finetune block as planned; read through `training`
    n_train: int  # training examples, balanced per label
    seed: int  # draws the training sample and seeds training
    steps: tuple[int, ...]
    max_steps: int
    run_dir: Path
    manifest_path: Path
    # how it runs: none of these changes the trained weights
    report_to: str | tuple[str, ...] = FINETUNE["report_to"]  # finetune.report_to: "auto", "none", or integrations
    device: str = "cpu"  # "cpu" or "cuda"; under several processes each picks its own
    threads: int = 1  # torch intra-op threads

    training: TrainingSettings = field(init=False, repr=False, compare=False)
    model_entry: ModelEntry = field(init=False, repr=False, compare=False)  # the typed `model_spec`

    def __post_init__(self):
        set_ = object.__setattr__
        set_(self, "labels", tuple(self.labels))
        set_(self, "steps", tuple(self.steps))
        set_(self, "train_path", Path(self.train_path))
        set_(self, "run_dir", Path(self.run_dir))
        set_(self, "manifest_path", Path(self.manifest_path))
        set_(self, "built_model_dir", None if self.built_model_dir is None else str(self.built_model_dir))
        if not isinstance(self.report_to, str):
            set_(self, "report_to", tuple(self.report_to))
        set_(self, "training", TrainingSettings.from_mapping(self.finetune))
        set_(self, "model_entry", ModelEntry.from_params(self.model_spec))

    @property
    def name(self) -> str:
        return self.model_entry.name

    @property
    def bf16(self) -> bool:
        return trains_in_bf16(self.model_entry, self.finetune)

    def to_dict(self) -> dict:
        """Every init field, JSON-ready (paths as strings, tuples as lists), sharing nothing with the job."""
        return json.loads(json.dumps({f.name: getattr(self, f.name) for f in fields(self) if f.init}, default=_path))

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_mapping(cls, d: dict) -> FinetuneJob:
        """From :meth:`to_dict`'s form; an unknown or missing field raises naming it."""
        init = [f for f in fields(cls) if f.init]
        names = {f.name for f in init}
        unknown = sorted(set(d) - names)
        if unknown:
            raise ValueError(
                f"finetune job: unknown field(s) {', '.join(unknown)}; expected {', '.join(sorted(names))}"
            )
        missing = [f.name for f in init if f.default is MISSING and f.default_factory is MISSING and f.name not in d]
        if missing:
            raise ValueError(f"finetune job: missing field(s) {', '.join(missing)}")
        return cls(**d)

    @classmethod
    def from_json(cls, text: str) -> FinetuneJob:
        return cls.from_mapping(json.loads(text))

    def on(self, *, device: str, threads: int) -> FinetuneJob:
        return replace(self, device=device, threads=threads)


def _path(value) -> str:
    """A path as JSON writes it; anything else JSON cannot hold is a bug, not a string."""
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"a finetune job holds {type(value).__name__}, which its JSON cannot")
