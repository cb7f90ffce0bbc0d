"""A model entry of the config, resolved once by planning: the typed object every later stage receives
as ``model_entry``. Its dict form (:meth:`ModelEntry.params`) is what params and records hold.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from .digests import canonical
from .errors import ConfigError

# where the weights come from: an entry gives exactly one (planning.checks), `source` the first in this order
MODEL_SOURCES = ("tiny", "hub", "path", "package", "series")
GGUF_SUFFIX = ".gguf"


@dataclass(frozen=True)
class ModelEntry:
    """One model entry of the config as planned (its keys: config/schema.yaml); read-only."""

    name: str
    method: str = "pattern"  # pattern (a verbaliser token per label, causal LMs) or head (a classification head)

    # -- where the weights come from: exactly one of tiny, hub, path, package, series (`source`)
    tiny: dict | None = None  # a small model built and pretrained by the workflow (schema: models.items.tiny)
    hub: str | None = None  # a Hugging Face model id
    package: str | None = None  # <package>/<folder> or <package>/<file>.gguf inside an installed package
    revision: str | None = None  # the hub model's commit or tag
    path: str | None = None  # a local save_pretrained folder, or a .gguf file
    series: dict | None = None  # existing checkpoints (schema: models.items.series)

    # -- how it is loaded
    dtype: str = "float32"  # float32 | bfloat16 | float16 | auto
    trust_remote_code: bool = False  # opt in to code shipped with the model
    allow_pickle_weights: bool = False  # opt in to .bin/.pt weights (unsafe pickle)
    gguf_chat_template: bool = False  # keep a GGUF file's chat template in the converted tokenizer

    # -- what it is prompted with, and which resources it gets
    prompt: dict | None = None  # the model's overrides of the global prompt (merged: planning.plan.ModelSpec)
    size_class: str | None = None  # a key of size_classes (its jobs' resources)

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> ModelEntry:
        """The entry of a job's params (:meth:`params`' form); a key this class does not have is a
        :class:`ConfigError`: the job runs other code than the plan was made with."""
        if not isinstance(params, Mapping):
            raise ConfigError(f"a model entry must be a mapping of its keys, got {type(params).__name__}")
        name = params.get("name")
        if not isinstance(name, str) or not name:
            raise ConfigError(f"a model entry needs a `name` (a non-empty string), got {name!r}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(str(k) for k in params if k not in known)
        if unknown:
            raise ConfigError(
                f"models[{name}]: unknown key(s) {', '.join(repr(k) for k in unknown)} in the job's model entry; "
                "the job runs other code than planned it: plan again with this code (run snakemake again), "
                f"or run the code that planned it (the keys a model entry has: {', '.join(sorted(known))})"
            )
        return cls(**{k: canonical(v) for k, v in params.items()})

    def params(self) -> dict:
        """The entry as Snakemake's params and the records hold it: the keys given, sorted (nested
        mappings too); a new dict each time, sharing nothing with the entry."""
        given = {f.name: getattr(self, f.name) for f in fields(self)}
        return canonical({k: v for k, v in given.items() if v is not None})

    # ---- what planning and loading ask of an entry -----------------------------------------

    @property
    def where(self) -> str:
        return f"models[{self.name}]"

    @property
    def source(self) -> str:
        """Where the weights come from: ``tiny``, ``hub``, ``path``, ``package`` or ``series``."""
        for key in MODEL_SOURCES:
            if getattr(self, key):
                return key
        raise ConfigError(f"{self.where}: give one of {', '.join(f'`{k}`' for k in MODEL_SOURCES)}")

    @property
    def is_tiny(self) -> bool:
        return self.source == "tiny"

    @property
    def is_series(self) -> bool:
        """Existing checkpoints, evaluated as they are: no finetune job."""
        return self.source == "series"

    @property
    def is_gguf(self) -> bool:
        """Whether the entry names a GGUF file, read without touching the disk: rule convert_gguf converts it."""
        where = self.package or self.path
        return bool(where) and str(where).lower().endswith(GGUF_SUFFIX)

    @property
    def source_record(self) -> dict:
        """Where the weights come from, as recorded with every result (``model_source``)."""
        if self.is_series:
            # the series as a whole; each record also holds its checkpoint's own location
            return canonical({"series": self.series.get("hub") or "local directories"})
        src = {k: getattr(self, k) for k in ("hub", "revision", "path", "package") if getattr(self, k)}
        return canonical(src or {"tiny": self.tiny["model_type"]})
