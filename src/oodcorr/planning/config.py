"""The experiment described by a (schema-validated) config, resolved against its registries.

:class:`Experiment` resolves a config against its dataset registries and label modes and
answers what a model's settings are once the global blocks and its own overrides are merged
(finetune, prompt, resources, series). It checks nothing beyond what resolving needs (a
label mode or registry entry it cannot read): each check of a config has one home, by kind:

* its shape and defaults: ``config/schema.yaml``, applied by :mod:`oodcorr.planning.schema`
  (to registry entries and label modes too);
* what the schema cannot say (names, overlaps, prompts, grids, schedules): :mod:`oodcorr.planning.checks`;
* what is on disk (dataset files, model folders, tokenizers, earlier results):
  :mod:`oodcorr.launch.disk_checks`.

:func:`oodcorr.planning.plan.load` runs the first two and builds the plan; what the workflow runs --
runs, schedules, jobs, params, resources -- is enumerated by :mod:`oodcorr.planning.plan`. Nothing
here imports torch, so planning stays fast.
"""

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

# the prompt switches' allowed values, for a model's own prompt, which the schema does not check
# (tests/planning/test_config.py ties them to the schema's); their defaults are oodcorr.core.defaults.READING
READING_CHOICES = {
    "strip_fields": (True, False),
    "truncation": ("left", "right"),
    "scored_position": ("last-token", "padded-end"),
}


def without_defaults(block: dict | None, defaults: dict) -> dict | None:
    """``block`` without the keys that equal their default in ``defaults``."""
    if block is None:
        return None
    return {k: v for k, v in block.items() if not (k in defaults and v == defaults[k])}


# analysis keys that are not the statistics' settings: `score` chooses the column analysed, not how;
# `max_cells` is a limit checked when planning (planning.plan_checks.check_analysis_size), which changes no result
NOT_OPTIONS = ("score", "max_cells")


def analysis_options(analysis: dict | None) -> dict:
    """The config's ``analysis`` section as the statistics read it (oodcorr.analysis.Options):
    without ``score``, which chooses the column analysed, not how, and ``max_cells``, a limit
    checked when planning (raising it reruns nothing)."""
    return {k: v for k, v in (analysis or {}).items() if k not in NOT_OPTIONS}


def changed_reading(prompt: dict | None) -> dict:
    """The prompt switches that differ from their defaults (empty for a default or absent prompt)."""
    return {k: prompt[k] for k in READING if prompt and k in prompt and prompt[k] != READING[k]}


def deep_merge(base: dict, over: dict | None) -> dict:
    """A copy of ``base`` with ``over`` merged in; nested dicts merge, all else replaces."""
    out = copy.deepcopy(base)
    for k, v in (over or {}).items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def finetune_block(config: dict, model: str) -> dict:
    """The global finetune block with model ``model``'s overrides merged in
    (:meth:`Experiment.finetune_cfg`)."""
    over = next(m for m in config["models"] if m["name"] == model).get("finetune") or {}
    out = deep_merge(config.get("finetune") or {}, over)
    for whole in ("checkpoints", "lora"):
        if whole in over:
            out[whole] = copy.deepcopy(over[whole])
    if "epochs" in over and "max_steps" not in over:
        out.pop("max_steps", None)
    return out


def report_to(config: dict, model: str) -> str | list[str]:
    """Where a model's finetune logs its loss (``finetune.report_to``, the model's own block over
    the global one). The finetune job reads it from the config, not from its params: it changes
    no weights, so editing it reruns nothing."""
    return finetune_block(config, model).get("report_to", FINETUNE["report_to"])


def trackers_of(config: dict) -> dict[str, list[str]]:
    """The experiment trackers each model's ``finetune.report_to`` names (``auto`` resolved:
    :func:`oodcorr.core.trackers.named`): the finetune logs its loss to them, the aggregation its scores."""
    return {m["name"]: trackers.named(report_to(config, m["name"])) for m in config["models"]}


def check_trackers(config: dict, root: str) -> None:
    """Every tracker any model's ``finetune.report_to`` names, installed and reachable from here
    (:func:`oodcorr.core.trackers.check`): while planning, in the main process (each job that writes
    to them checks again when it starts: a compute node is not the login node)."""
    trackers.check(sorted({n for names in trackers_of(config).values() for n in names}), root)


class Experiment:
    """Read-only view of a validated config, resolved against dataset registries."""

    def __init__(self, config: dict, basedir: str | Path = "."):
        self.config = config
        self.basedir = Path(basedir)
        self.label_mode = self._load_label_mode()
        self.datasets = self._load_datasets()
        self.models = {m["name"]: m for m in config["models"]}
        self.in_domain = {d["name"]: d for d in config["in_domain"]}

    # ---- registries --------------------------------------------------------------------
    def _load_label_mode(self) -> dict:
        """The experiment's label mode: resources/label_modes.yaml plus the config's ``label_modes``."""
        modes = dict(load_yaml(self.basedir / LABEL_MODES) or {})
        modes.update(self.config.get("label_modes") or {})
        name = self.config.get("label_mode", "binary")
        if name not in modes:
            raise ConfigError(
                f"label_mode: {name!r} is not defined in {LABEL_MODES} or `label_modes` "
                f"(known: {', '.join(sorted(modes))})"
            )
        mode = modes[name]
        check_entry(mode, "label_mode", f"label_modes.{name}", self.basedir)
        return canonical(dict(mode, name=name))

    def _load_datasets(self) -> dict[str, dict]:
        reg: dict[str, dict] = {}
        for rel in self.config.get("registries", []):
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
                reg[name] = dict(deep_merge(reg.get(name, {}), entry), _registry=str(path))
        for name, entry in (self.config.get("datasets") or {}).items():
            # an inline entry overrides (merges over) a registry entry of the same name
            reg[name] = deep_merge(reg.get(name, {}), entry)
        return reg

    def resolve_path(self, p: str | Path) -> Path:
        p = Path(p)
        return p if p.is_absolute() else self.basedir / p

    def dataset(self, name: str) -> dict:
        try:
            return self.datasets[name]
        except KeyError:
            raise ConfigError(f"dataset {name!r} is not defined in `datasets` or any file in `registries`") from None

    # ---- the resolved config (oodcorr.planning.plan turns it into typed specs) --------------------
    @property
    def labels(self) -> list[str]:
        """The labels every model predicts, in order (from the label mode)."""
        return list(self.label_mode["labels"])

    def is_series(self, model: str) -> bool:
        """Whether a model is a series of existing checkpoints (evaluated as it is, never finetuned)."""
        return bool(self.models[model].get("series"))

    def finetuned_models(self) -> list[str]:
        return [m for m in self.models if not self.is_series(m)]

    def series_x(self, model: str) -> list[int]:
        """A series' x-axis values (steps or token counts), in the order given."""
        return [int(ck.get("step", ck.get("tokens", -1))) for ck in self.models[model]["series"]["checkpoints"]]

    def series_unit(self, model: str) -> str:
        """``step`` or ``tokens``: what a series' x-axis counts (``step`` for finetuned models)."""
        cks = (self.models[model].get("series") or {}).get("checkpoints") or [{}]
        return "tokens" if "tokens" in cks[0] else "step"

    def series_checkpoints(self, model: str) -> dict[int, dict]:
        """x value -> ``{"path"}`` or ``{"hub", "revision"}``: where each checkpoint of a series is."""
        series = self.models[model]["series"]
        out = {}
        for x, ck in zip(self.series_x(model), series["checkpoints"]):
            out[x] = {"path": ck["path"]} if ck.get("path") else {"hub": series["hub"], "revision": ck["revision"]}
        return out

    def in_domain_of(self, model: str) -> list[str]:
        """The in-domain sets a model's runs belong to: all of them, or those its series names."""
        chosen = (self.models[model].get("series") or {}).get("in_domain")
        return [d for d in self.in_domain if not chosen or d in chosen]

    def method(self, model: str) -> str:
        """How a model is adapted and scored: ``pattern`` (prompt + verbaliser) or ``head``."""
        return self.models[model]["method"]  # the schema's default, filled in when planning

    def finetune_cfg(self, model: str) -> dict:
        """The global finetune block with the model's overrides merged in.

        A model's ``checkpoints`` or ``lora`` block replaces the global one whole,
        and a model-level ``epochs`` (without ``max_steps``) drops the global
        ``max_steps``, so an override always means what it says.
        """
        return finetune_block(self.config, model)

    def finetune_params(self, model: str) -> dict:
        """The finetune settings a run needs (not the n_train/seeds lists; switches at their
        defaults left out), canonically ordered.

        ``report_to`` (where the loss is logged while training) changes no weights: left out,
        so editing it reruns nothing (the finetune script reads it from the config)."""
        ft = {k: v for k, v in self.finetune_cfg(model).items() if k not in ("n_train", "seeds", "report_to")}
        return canonical(without_defaults(ft, FINETUNE))

    def testsets_for(self, in_domain: str) -> list[tuple[str, str]]:
        """(testset, role) pairs evaluated for runs trained on ``in_domain``.

        The in-domain test set comes first with role ``in-domain``; an OOD list
        entry equal to it (natural when several in-domain sets share one OOD
        list) is evaluated once, as in-domain.
        """
        test = self.in_domain[in_domain]["test"]
        return [(test, "in-domain")] + [(t, "ood") for t in self.config["ood_testsets"] if t != test]

    def all_datasets(self) -> list[str]:
        """Every dataset a job reads: the in-domain test sets, the OOD testsets, and the training
        sets when any model is finetuned."""
        names = []
        train = bool(self.finetuned_models())
        for d in self.in_domain.values():
            names += ([d["train"]] if train and d.get("train") else []) + [d["test"]]
        names += list(self.config["ood_testsets"])
        return list(dict.fromkeys(names))

    def model_entry(self, model: str) -> ModelEntry:
        """The model entry minus what does not change results (resources, finetune overrides, sharding,
        the parameter count given for planning), typed once here for every later stage.

        A series keeps ``hub`` and gains ``tokenizer`` (its first checkpoint, where the tokenizer
        is read) but not its checkpoint list: each checkpoint reaches its evaluation through its
        own manifest, so adding a checkpoint changes no other job's params."""
        entry = {
            k: v for k, v in self.models[model].items() if k not in ("resources", "finetune", "distributed", "params_b")
        }
        if entry.get("series"):
            first = next(iter(self.series_checkpoints(model).values()))
            entry["series"] = {k: v for k, v in entry["series"].items() if k not in ("checkpoints", "in_domain")}
            entry["series"]["tokenizer"] = first
        return ModelEntry.from_params(entry)

    def dataset_params(self, name: str) -> dict:
        """A dataset entry minus bookkeeping (description, where it was defined)."""
        spec = self.dataset(name)
        # keys of another source (left by a local override of a hub entry) change nothing
        unused = {"hub"} if spec.get("source") != "hub" else {"path", "format"}
        return canonical({k: v for k, v in spec.items() if k not in ("description", "citation", "_registry", *unused)})

    def dataset_input(self, name: str) -> list[str]:
        """A local dataset's file, so Snakemake reruns preparation when the file changes."""
        spec = self.dataset(name)
        if spec.get("source") == "local" and spec.get("path"):
            return [str(self.resolve_path(spec["path"]))]
        return []

    def prompt_for(self, model: str) -> dict | None:
        """The model's prompt (global prompt with its overrides; switches at their defaults left
        out); None for head models, which use none."""
        if self.method(model) != "pattern":
            return None
        merged = deep_merge(self.config["prompt"], self.models[model].get("prompt"))
        return canonical(without_defaults(merged, READING))

    def resource_layers(self, model: str) -> list[tuple[str, dict]]:
        """Where a model's job resources come from, least specific first: (config key, mapping of
        rule -> resources) for the config's ``resources``, the model's size class, its own ``resources``."""
        m = self.models[model]
        layers = [("resources", dict(self.config.get("resources") or {}))]
        if m.get("size_class"):
            layers.append((f"size_classes.{m['size_class']}", dict(self.config["size_classes"][m["size_class"]] or {})))
        layers.append((f"models[{model}].resources", dict(m.get("resources") or {})))
        return layers

    def resources(self, model: str, rule: str) -> dict:
        """A job's own resources for ``rule``: the config's, then the model's size class, then the model's
        own (placement sets ``default``/``cpu`` not applied: see :func:`oodcorr.planning.resources.model_resources`)."""
        out: dict = {}
        for _, layer in self.resource_layers(model):
            out = deep_merge(out, layer.get(rule))
        return out
