"""The experiment a schema-validated config describes, resolved against its registries and label modes:
each model's settings once the global blocks and its own overrides are merged. Checks live in :mod:`.checks`."""

from __future__ import annotations

import copy
import re
from pathlib import Path

from ..core import trackers
from ..core.defaults import FINETUNE, READING
from ..core.digests import canonical
from ..core.errors import ConfigError
from ..core.model_entry import ModelEntry
from ..core.yaml_files import load_yaml
from .schema import check_entry

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
HASH_RE = re.compile(r"^[0-9a-f]{40}$")
LABEL_MODES = "resources/label_modes.yaml"
DATASET_SOURCES = ("synthetic", "local", "hub")


def _without_defaults(block: dict, defaults: dict) -> dict:
    return {k: v for k, v in block.items() if not (k in defaults and v == defaults[k])}


def analysis_options(analysis: dict | None) -> dict:
    """The config's ``analysis`` section as the statistics read it: without ``score`` (the column analysed,
    not how) and ``max_cells`` (a limit checked when planning: raising it reruns nothing)."""
    return {k: v for k, v in (analysis or {}).items() if k not in ("score", "max_cells")}


def changed_reading(prompt: dict | None) -> dict:
    """The prompt switches that differ from their defaults (empty for a default or absent prompt)."""
    return {k: prompt[k] for k in READING if prompt and k in prompt and prompt[k] != READING[k]}


def _deep_merge(base: dict, over: dict | None) -> dict:
    """A copy of ``base`` with ``over`` merged in; nested dicts merge, all else replaces."""
    out = copy.deepcopy(base)
    for k, v in (over or {}).items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _deep_merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def _finetune_block(config: dict, model: str) -> dict:
    """The global finetune block with the model's overrides merged in: its ``checkpoints`` or ``lora``
    replaces the global one whole, its ``epochs`` (without ``max_steps``) drops the global ``max_steps``."""
    over = next(m for m in config["models"] if m["name"] == model).get("finetune") or {}
    out = _deep_merge(config.get("finetune") or {}, over)
    for whole in ("checkpoints", "lora"):
        if whole in over:
            out[whole] = copy.deepcopy(over[whole])
    if "epochs" in over and "max_steps" not in over:
        out.pop("max_steps", None)
    return out


def report_to(config: dict, model: str) -> str | list[str]:
    """Where a model's finetune logs its loss; read from the config, not the params: editing it reruns nothing."""
    return _finetune_block(config, model).get("report_to", FINETUNE["report_to"])


def trackers_of(config: dict) -> dict[str, list[str]]:
    """The experiment trackers each model's ``finetune.report_to`` names (``auto`` resolved)."""
    return {m["name"]: trackers.named(report_to(config, m["name"])) for m in config["models"]}


def check_trackers(config: dict, root: str) -> None:
    """Every tracker any model names, installed and reachable from here (each job checks again where it runs)."""
    trackers.check(sorted({n for names in trackers_of(config).values() for n in names}), root)


class Experiment:
    """Read-only view of a validated config, resolved against dataset registries."""

    def __init__(self, config: dict, basedir: str | Path = "."):
        self.config = config
        self.basedir = Path(basedir)
        modes = dict(load_yaml(self.basedir / LABEL_MODES) or {})
        modes.update(config.get("label_modes") or {})
        mode = config.get("label_mode", "binary")
        if mode not in modes:
            raise ConfigError(
                f"label_mode: {mode!r} is not defined in {LABEL_MODES} or `label_modes` "
                f"(known: {', '.join(sorted(modes))})"
            )
        check_entry(modes[mode], "label_mode", f"label_modes.{mode}", self.basedir)
        self.label_mode = canonical(dict(modes[mode], name=mode))
        reg: dict[str, dict] = {}
        for rel in config.get("registries", []):
            path = self.resolve_path(rel)
            doc = load_yaml(path) or {}
            entries = doc.get("datasets", doc) if isinstance(doc, dict) else None
            if not isinstance(entries, dict):
                raise ConfigError(f"registries: {path} must map dataset names to entries")
            for name, entry in entries.items():
                if not isinstance(entry, dict):
                    raise ConfigError(f"registries: {path}: dataset {name!r} must be a mapping")
                check_entry(entry, "dataset", f"{path}: dataset {name!r}", self.basedir)
                # a later registry refines an earlier one's entry (e.g. a local-file override)
                reg[name] = dict(_deep_merge(reg.get(name, {}), entry), _registry=str(path))
        for name, entry in (config.get("datasets") or {}).items():
            # an inline entry overrides (merges over) a registry entry of the same name
            reg[name] = _deep_merge(reg.get(name, {}), entry)
        self.datasets = reg
        self.models = {m["name"]: m for m in config["models"]}
        self.in_domain = {d["name"]: d for d in config["in_domain"]}

    def resolve_path(self, p: str | Path) -> Path:
        p = Path(p)
        return p if p.is_absolute() else self.basedir / p

    def dataset(self, name: str) -> dict:
        try:
            return self.datasets[name]
        except KeyError:
            raise ConfigError(f"dataset {name!r} is not defined in `datasets` or any file in `registries`") from None

    @property
    def labels(self) -> list[str]:
        return list(self.label_mode["labels"])

    def finetuned_models(self) -> list[str]:
        return [m for m, entry in self.models.items() if not entry.get("series")]

    def series_x(self, model: str) -> list[int]:
        return [int(ck.get("step", ck.get("tokens", -1))) for ck in self.models[model]["series"]["checkpoints"]]

    def series_checkpoints(self, model: str) -> dict[int, dict]:
        """x value -> ``{"path"}`` or ``{"hub", "revision"}``: where each checkpoint of a series is."""
        series = self.models[model]["series"]
        return {
            x: {"path": ck["path"]} if ck.get("path") else {"hub": series["hub"], "revision": ck["revision"]}
            for x, ck in zip(self.series_x(model), series["checkpoints"])
        }

    def method(self, model: str) -> str:
        return self.models[model]["method"]

    def finetune_cfg(self, model: str) -> dict:
        return _finetune_block(self.config, model)

    def finetune_params(self, model: str) -> dict:
        """The finetune settings a run needs: no n_train/seeds lists, no report_to, switches at defaults left out."""
        ft = {k: v for k, v in self.finetune_cfg(model).items() if k not in ("n_train", "seeds", "report_to")}
        return canonical(_without_defaults(ft, FINETUNE))

    def testsets_for(self, in_domain: str) -> list[tuple[str, str]]:
        """(testset, role) pairs of runs trained on ``in_domain``: its test set first, then the other OOD sets."""
        test = self.in_domain[in_domain]["test"]
        return [(test, "in-domain")] + [(t, "ood") for t in self.config["ood_testsets"] if t != test]

    def all_datasets(self) -> list[str]:
        """Every dataset a job reads (the training sets only when a model is finetuned)."""
        names = []
        train = bool(self.finetuned_models())
        for d in self.in_domain.values():
            names += ([d["train"]] if train and d.get("train") else []) + [d["test"]]
        names += list(self.config["ood_testsets"])
        return list(dict.fromkeys(names))

    def model_entry(self, model: str) -> ModelEntry:
        """The typed model entry minus what changes no result. A series keeps ``tokenizer`` (its first
        checkpoint), not its checkpoints: adding one changes no other job's params."""
        entry = {
            k: v for k, v in self.models[model].items() if k not in ("resources", "finetune", "distributed", "params_b")
        }
        if entry.get("series"):
            first = next(iter(self.series_checkpoints(model).values()))
            entry["series"] = {k: v for k, v in entry["series"].items() if k not in ("checkpoints", "in_domain")}
            entry["series"]["tokenizer"] = first
        return ModelEntry.from_params(entry)

    def dataset_params(self, name: str) -> dict:
        spec = self.dataset(name)
        # keys of another source (left by a local override of a hub entry) change nothing
        unused = {"hub"} if spec.get("source") != "hub" else {"path", "format"}
        return canonical({k: v for k, v in spec.items() if k not in ("description", "citation", "_registry", *unused)})

    def dataset_input(self, name: str) -> list[str]:
        spec = self.dataset(name)
        if spec.get("source") == "local" and spec.get("path"):
            return [str(self.resolve_path(spec["path"]))]
        return []

    def prompt_for(self, model: str) -> dict | None:
        """The global prompt with the model's overrides (switches at defaults left out); None for head models."""
        if self.method(model) != "pattern":
            return None
        merged = _deep_merge(self.config["prompt"], self.models[model].get("prompt"))
        return canonical(_without_defaults(merged, READING))
