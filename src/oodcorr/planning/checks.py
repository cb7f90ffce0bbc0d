"""The checks of what a config decides that its schema cannot state, each raising ConfigError naming the key
or returning warnings; what is on disk is :mod:`oodcorr.launch.disk_checks`."""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable

from ..core.errors import ConfigError
from . import model_checks
from .config import DATASET_SOURCES, NAME_RE, Experiment

# a testset (or training sample) with more than this share of its prompts cut to max_length is a warning
TRUNCATION_WARNING = 0.05


def check_config(exp: Experiment) -> list[str]:
    """Every check of the config alone, in the order a reader fixes them; returns the warnings."""
    check_label_mode(exp)
    check_names(exp)
    check_datasets(exp)
    check_ood_overlap(exp)
    warnings = model_checks.check_models(exp)
    model_checks.check_templates(exp)
    model_checks.check_verbaliser_words(exp)
    check_n_train(exp)
    check_ood_count(exp)
    check_data_sources(exp)
    return warnings


def _unique(items: Iterable, key: str) -> None:
    seen = set()
    for x in items:
        if x in seen:
            raise ConfigError(f"{key}: duplicate name {x!r}")
        seen.add(x)


def _path_component(name: str, key: str) -> None:
    if not NAME_RE.match(name):
        raise ConfigError(f"{key}: {name!r} must match {NAME_RE.pattern} (it becomes a path component)")


def check_names(exp: Experiment) -> None:
    """Names are listed once, can be path components (the schema checks those of models, in-domain sets, OOD
    testsets and the experiment) and differ in more than case."""
    cfg = exp.config
    _unique([m["name"] for m in cfg["models"]], "models[].name")
    _unique([d["name"] for d in cfg["in_domain"]], "in_domain[].name")
    _unique(cfg["ood_testsets"], "ood_testsets")
    for d in cfg["in_domain"]:
        for key in ("train", "test"):
            if key in d:
                _path_component(d[key], f"in_domain[{d['name']}].{key}")
    _distinct_ignoring_case(list(exp.models), "models[].name", "heatmaps/<model>.png, finetune/<model>/, ...")
    _distinct_ignoring_case(list(exp.in_domain), "in_domain[].name", "finetune/<model>/<in-domain>/, ...")
    _distinct_ignoring_case(
        sorted(set(exp.all_datasets())),
        "datasets (in_domain train and test sets, ood_testsets)",
        "data/<dataset>.jsonl, eval/.../<testset>.predictions.parquet, consensus/<test set>.png, forest/...",
    )


def _distinct_ignoring_case(names: list[str], key: str, files: str) -> None:
    seen: dict[str, str] = {}
    for n in names:
        other = seen.setdefault(n.lower(), n)
        if other != n:
            raise ConfigError(
                f"{key}: {other!r} and {n!r} differ only in case; they name files ({files}), and where the file "
                "system ignores case (macOS, Windows, some network mounts) the two are one file, one result "
                "overwriting the other. Rename one"
            )


def check_label_mode(exp: Experiment) -> None:
    """A label map's targets are the mode's labels; a coarse label collapses some into one not output."""
    mode, name = exp.label_mode, exp.label_mode["name"]
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


def _known_dataset(exp: Experiment, name: str, key: str) -> None:
    if name not in exp.datasets:
        near = difflib.get_close_matches(name, list(exp.datasets), n=3)
        hint = f"; did you mean {', '.join(map(repr, near))}?" if near else ""
        raise ConfigError(f"{key}: dataset {name!r} is not defined in `datasets` or any file in `registries`{hint}")


def check_datasets(exp: Experiment) -> None:
    """Every dataset named is defined, with a known source; a finetuned model needs finetune and training data."""
    cfg = exp.config
    finetuned = exp.finetuned_models()
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
            if key in d:
                _known_dataset(exp, d[key], f"in_domain[{d['name']}].{key}")
    for t in cfg["ood_testsets"]:
        _known_dataset(exp, t, "ood_testsets")
    for name in exp.all_datasets():
        spec = exp.dataset(name)
        if spec.get("source") not in DATASET_SOURCES:
            where = spec.get("_registry", "datasets")
            raise ConfigError(
                f"{where}: dataset {name!r}: source must be one of {', '.join(DATASET_SOURCES)} "
                f"(got {spec.get('source')!r})"
            )


def check_ood_overlap(exp: Experiment) -> None:
    """An OOD testset is never a training set, nor (with one in-domain set) its test set."""
    ood = exp.config["ood_testsets"]
    in_domain = exp.config["in_domain"]
    for d in in_domain:
        if d.get("train") in ood:
            raise ConfigError(
                f"ood_testsets: {d['train']!r} is the training set of in_domain[{d['name']}]; "
                "a model cannot be tested out of distribution on its own training data"
            )
    if len(in_domain) == 1 and in_domain[0]["test"] in ood:
        d = in_domain[0]
        raise ConfigError(
            f"ood_testsets: {d['test']!r} is the in-domain test set of in_domain[{d['name']}] "
            "(it is evaluated as in-domain already); remove it from ood_testsets"
        )


def check_n_train(exp: Experiment) -> None:
    """Each run trains on ``n_train / len(labels)`` examples of every label: a multiple of the label count."""
    labels = exp.labels
    k = len(labels)
    mode = exp.config.get("label_mode", "binary")
    for m in exp.finetuned_models():
        over = (exp.models[m].get("finetune") or {}).get("n_train")
        key = f"models[{m}].finetune.n_train" if over is not None else "finetune.n_train"
        for n in exp.finetune_cfg(m).get("n_train") or []:
            if isinstance(n, bool) or not isinstance(n, int):
                continue  # the schema names it
            if n < k:
                raise ConfigError(
                    f"{key}: {n} is fewer than the {k} labels of label mode {mode!r} ({', '.join(labels)}); a run "
                    f"trains on n_train / {k} examples of each label, so n_train must be a multiple of {k}, "
                    f"at least {k}"
                )
            if n % k:
                lo, hi = n // k * k, (n // k + 1) * k
                raise ConfigError(
                    f"{key}: {n} is not a multiple of the {k} labels of label mode {mode!r} ({', '.join(labels)}); "
                    f"a run trains on n_train / {k} examples of each label: use {lo} or {hi}"
                )


def check_ood_count(exp: Experiment) -> None:
    for d in exp.in_domain:
        ood = [t for t, role in exp.testsets_for(d) if role == "ood"]
        if len(ood) < 2:
            raise ConfigError(
                f"ood_testsets: runs trained on in_domain[{d}] are evaluated on {len(ood)} OOD "
                f"testset(s) {ood}; the analysis correlates pairs of OOD testsets, so list at least "
                "two (besides the in-domain test set)"
            )


def _data_source(exp: Experiment, name: str) -> tuple | None:
    """What a dataset's examples are read from, without the settings that only relabel or subsample them."""
    spec = exp.dataset(name)
    where = json.dumps(spec.get("where"), sort_keys=True, default=str)
    if spec.get("source") == "local" and spec.get("path"):
        return ("local", str(exp.resolve_path(spec["path"]).resolve()), where)
    if spec.get("source") == "hub":
        hub = spec.get("hub") or {}
        return ("hub", hub.get("id"), hub.get("config"), hub.get("split"), where)
    if spec.get("source") == "synthetic":
        return ("synthetic", spec.get("shift"), spec.get("seed", 0), spec.get("split", "test"))
    return None


def _describe_source(src: tuple) -> str:
    if src[0] == "local":
        return f"the file {src[1]}"
    if src[0] == "hub":
        return f"hub dataset {src[1]} ({src[2] or 'default config'}, split {src[3]})"
    return f"the synthetic {src[1]!r} stream, seed {src[2]}, split {src[3]}"


def check_data_sources(exp: Experiment) -> None:
    """Neither an in-domain test set nor an OOD testset reads the training set's data."""
    for d, entry in exp.in_domain.items():
        train, test = entry.get("train"), entry["test"]
        if train is None:  # only series models: nothing is trained, no pool to keep apart
            continue
        if test == train:
            raise ConfigError(
                f"in_domain[{d}].test: {test!r} is also its training set (in_domain[{d}].train); "
                "a run would be tested on the pool it was trained from. Give a held-out test set"
            )
        pool = _data_source(exp, train)
        if pool is None:
            continue
        if _data_source(exp, test) == pool:
            raise ConfigError(
                f"in_domain[{d}].test: dataset {test!r} reads the same data as the training set "
                f"{train!r} ({_describe_source(pool)}), so its examples would come from the training "
                "pool. Give a held-out test set (another file or split, or a `where` that selects "
                "other rows)"
            )
        for t in exp.config["ood_testsets"]:
            if t != train and _data_source(exp, t) == pool:
                raise ConfigError(
                    f"ood_testsets: {t!r} reads the same data as the training set {train!r} of "
                    f"in_domain[{d}] ({_describe_source(pool)}); a model cannot be tested out of "
                    "distribution on its own training data"
                )
