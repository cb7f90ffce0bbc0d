"""What one finetune job trains and how it runs: :class:`FinetuneJob`, and the typed view of
its ``finetune`` block that the Trainer reads, :class:`TrainingSettings`.

The rule's script (``workflow/scripts/finetune.py``) builds a job from the plan's params and
the rule's wildcards, inputs and outputs; :func:`oodcorr.jobs.finetune.finetune` trains it; across
processes (:mod:`oodcorr.jobs.multi_gpu`) it travels as JSON (:meth:`FinetuneJob.to_json`,
:meth:`FinetuneJob.from_json`).

The job keeps the plan's ``finetune`` and ``model_spec`` dicts as they were planned, read through
their typed views :attr:`FinetuneJob.training` and :attr:`FinetuneJob.model_entry` (made when the job
is built): the run's identity (``run_identity.json``, :mod:`oodcorr.jobs.checkpoints`) and the job's
manifest are made from those dicts, so they stay byte-identical to those of runs trained before these
objects existed, and a finished run is never trained again for a change of representation. Nothing
here imports torch.
"""

from __future__ import annotations

import json
import math
from dataclasses import MISSING, dataclass, field, fields, replace
from pathlib import Path

from ..core.defaults import FINETUNE
from ..core.errors import ConfigError
from ..core.model_entry import ModelEntry


def trains_in_bf16(model_entry: ModelEntry, finetune: dict) -> bool:
    """bf16 mixed precision: for a bf16 model, or when ``finetune.bf16`` asks (the one rule the
    single-process Trainer and the multi-process launcher both follow)."""
    return model_entry.dtype == "bfloat16" or bool(finetune.get("bf16"))


# keys of the finetune block that planning reads (the run's length and schedule, the grid) and
# training does not: the plan has already turned them into steps, max_steps, n_train and seed
PLANNING_KEYS = ("n_train", "seeds", "max_steps", "epochs", "checkpoints", "report_to")


@dataclass(frozen=True)
class TrainingSettings:
    """The ``finetune`` block as the Trainer reads it: types checked, defaults filled in.

    A read-only view: the job keeps the block itself (see the module docstring). The defaults
    are those a block without the key has always trained with.
    """

    # -- required (the schema requires batch_size and learning_rate and fills in max_length)
    batch_size: int  # examples per device per step
    learning_rate: float
    max_length: int  # prompt tokens kept

    # -- the optimiser and its schedule
    gradient_accumulation_steps: int = 1
    weight_decay: float = 0.0
    warmup_ratio: float = 0.0  # of max_steps, rounded up to whole steps (warmup_steps)
    lr_scheduler: str = "linear"  # a transformers scheduler name
    max_grad_norm: float = 1.0

    # -- what is trained and on what loss
    bf16: bool = False  # bf16 mixed precision on a GPU (a bf16 model trains so regardless)
    loss: str = FINETUNE["loss"]  # "verbalisers" or "vocabulary" (oodcorr.jobs.finetune.training_loss)
    lora: dict | None = None  # LoRA adapters (oodcorr.jobs.finetune.apply_lora); None: full finetuning

    @classmethod
    def from_mapping(cls, finetune: dict) -> TrainingSettings:
        """From the plan's ``finetune`` block. The keys planning reads (``max_steps``, ``epochs``,
        ``checkpoints``, ...) are passed over; a key neither reads, or a required one missing,
        raises :class:`ConfigError` naming ``finetune.<key>``."""
        block = dict(finetune or {})
        names = {f.name for f in fields(cls)}
        unknown = sorted(k for k in block if k not in names and k not in PLANNING_KEYS)
        if unknown:
            raise ConfigError(
                f"unknown finetune setting(s): {', '.join('finetune.' + k for k in unknown)}; "
                "see config/schema.yaml for the keys of the finetune block"
            )
        missing = [k for k in ("batch_size", "learning_rate", "max_length") if k not in block]
        if missing:
            raise ConfigError(
                f"{', '.join('finetune.' + k for k in missing)} missing: the finetune block needs "
                "batch_size, learning_rate and max_length (the workflow's schema fills in max_length)"
            )
        kw = {k: v for k, v in block.items() if k in names}
        for k in ("batch_size", "max_length", "gradient_accumulation_steps"):
            if k in kw:
                kw[k] = int(kw[k])
        for k in ("learning_rate", "weight_decay", "warmup_ratio", "max_grad_norm"):
            if k in kw:
                kw[k] = float(kw[k])
        if "bf16" in kw:
            kw["bf16"] = bool(kw["bf16"])
        return cls(**kw)

    def warmup_steps(self, max_steps: int) -> int:
        """Warm-up in whole steps: ``warmup_ratio`` of the run, rounded up."""
        return int(math.ceil(self.warmup_ratio * max_steps))


@dataclass(frozen=True)
class FinetuneJob:
    """One run's finetuning: what is trained (from the plan and the rule) and how it runs.

    The dict fields hold the config's blocks as planned (``Plan.finetune_params``); treat them
    as read-only. A job is valid once built: its ``finetune`` block is read into
    :attr:`training` at once, so a bad block fails before any process starts or any file is read.
    """

    # -- what the job trains: the model and its starting weights
    model_spec: dict  # the model's entry as planned (Plan.finetune_params' model_spec); read through `model_entry`
    # the folder the workflow builds the model in (a `tiny` entry's stand-in, a GGUF file's conversion); else None
    built_model_dir: str | None

    # -- on what data, with which prompt and settings
    train_path: Path  # the in-domain training set (JSONL)
    labels: tuple[str, ...]  # the label names, in the order of the model's outputs
    prompt: dict | None  # the prompt block (template, verbalisers); None for a head model
    finetune: dict  # the finetune block as planned; read through `training`
    n_train: int  # training examples, balanced per label
    seed: int  # draws the training sample and seeds training

    # -- the schedule: the steps saved as checkpoints (0 is the untrained model) and the run's length
    steps: tuple[int, ...]
    max_steps: int

    # -- where it writes: the run's folder (checkpoints, lock, identity) and the job's manifest
    run_dir: Path
    manifest_path: Path

    # -- how it runs: none of these changes the trained weights
    report_to: str | tuple[str, ...] = FINETUNE["report_to"]  # finetune.report_to: "auto", "none", or integrations
    device: str = "cpu"  # "cpu" or "cuda"; under several processes each picks its own
    threads: int = 1  # torch intra-op threads

    training: TrainingSettings = field(init=False, repr=False, compare=False)
    model_entry: ModelEntry = field(init=False, repr=False, compare=False)  # the typed `model_spec`

    def __post_init__(self):
        # JSON and Snakemake hand over lists and str subclasses: one form for each field
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
        """The model entry's name (as error messages and the manifest give it)."""
        return self.model_entry.name

    @property
    def bf16(self) -> bool:
        """Whether training asks for bf16 mixed precision (:func:`trains_in_bf16`)."""
        return trains_in_bf16(self.model_entry, self.finetune)

    # ---- to and from JSON (the arguments file of a multi-process launch) ---------------------

    def to_dict(self) -> dict:
        """Every init field, JSON-ready (paths as strings, tuples as lists)."""
        out = {}
        for f in fields(self):
            if not f.init:
                continue
            v = getattr(self, f.name)
            out[f.name] = str(v) if isinstance(v, Path) else list(v) if isinstance(v, tuple) else v
        return json.loads(json.dumps(out))  # a deep copy: the dict shares nothing with the job

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
        required = [f.name for f in init if f.default is MISSING and f.default_factory is MISSING]
        missing = [k for k in required if k not in d]
        if missing:
            raise ValueError(f"finetune job: missing field(s) {', '.join(missing)}")
        return cls(**d)

    @classmethod
    def from_json(cls, text: str) -> FinetuneJob:
        return cls.from_mapping(json.loads(text))

    def on(self, *, device: str, threads: int) -> FinetuneJob:
        """The same job, run on ``device`` with ``threads`` threads (each launched process picks its own)."""
        return replace(self, device=device, threads=threads)
