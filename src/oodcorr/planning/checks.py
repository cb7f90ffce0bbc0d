"""Every check of what a config decides that its schema cannot state, refused before any job.

A config's checks have one home by kind: its shape and defaults are ``config/schema.yaml``
(:mod:`oodcorr.planning.schema`); what is on disk is :mod:`oodcorr.launch.disk_checks` (they read tokenizers
and what jobs wrote, so they sit above the job modules); the checks of the config alone are here,
those of each model entry and its prompt in :mod:`oodcorr.planning.model_checks`, and those of what
the plan built from the config (the models' resources, the runs) in :mod:`oodcorr.planning.plan_checks`.
Each check is a function of its own, raising :class:`~oodcorr.core.errors.ConfigError` naming the key,
or returning warnings for what is allowed but suspicious. :func:`oodcorr.planning.plan.build_plan`
calls :func:`check_config` on the resolved experiment, then the plan's checks once it has built it:

* :func:`check_names` -- names listed twice, names that cannot be path components, the
  experiment's name;
* :func:`check_label_mode` -- a label map or coarse label outside the mode's labels;
* :func:`check_datasets` -- in-domain and OOD sets that no registry defines, unknown sources,
  training sets missing where a model is finetuned;
* :func:`check_ood_overlap` -- an OOD testset that is a training set or the in-domain test set;
* :func:`oodcorr.planning.model_checks.check_models` -- one source per model, size classes, unpinned
  hub revisions (warning), prompts and reading switches, the vocabulary loss, a series of existing
  checkpoints;
* :func:`check_evaluation` -- the evaluation unit;
* :func:`oodcorr.planning.model_checks.check_templates` -- prompt templates: placeholders other than
  ``{premise}`` and ``{hypothesis}``, unbalanced (literal) braces;
* :func:`oodcorr.planning.model_checks.check_verbaliser_words` -- two labels with the same verbaliser;
* :func:`check_n_train` -- an ``n_train`` below the number of labels, or not a multiple of it;
* :func:`check_ood_count` -- fewer than two OOD testsets for a run (no pair to correlate);
* :func:`check_data_sources` -- an in-domain test set, or an OOD testset, that reads the
  training set's data.

Nothing here imports torch, transformers or pandas: planning stays fast.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable

from ..core.errors import ConfigError
from . import model_checks
from .config import DATASET_SOURCES, NAME_RE, Experiment

# a testset (or training sample) with more than this share of its prompts cut to max_length is a warning
TRUNCATION_WARNING = 0.05
UNITS = ("checkpoint", "run")  # evaluation.unit: one job per checkpoint x testset, or per run x testset


# ---- the config alone ---------------------------------------------------------------------
def check_config(exp: Experiment) -> list[str]:
    """Every check of the config alone, in the order a reader fixes them (the label mode, names,
    then what they point at, then the models, then what the runs would do). Returns the warnings."""
    check_label_mode(exp)
    check_names(exp)
    check_datasets(exp)
    check_ood_overlap(exp)
    warnings = model_checks.check_models(exp)
    check_evaluation(exp)
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


def _path_component(name: str, key: str, why: str | None = None) -> None:
    if not NAME_RE.match(name):
        raise ConfigError(f"{key}: {name!r} must match {NAME_RE.pattern}" + (f" ({why})" if why else ""))


def check_names(exp: Experiment) -> None:
    """Names are listed once and can be path components (models, in-domain sets, the datasets
    they name, OOD testsets, the experiment)."""
    cfg = exp.config
    _unique([m["name"] for m in cfg["models"]], "models[].name")
    _unique([d["name"] for d in cfg["in_domain"]], "in_domain[].name")
    _unique(cfg["ood_testsets"], "ood_testsets")
    for key, names in (("models[].name", exp.models), ("in_domain[].name", exp.in_domain)):
        for n in names:
            _path_component(n, key, "it becomes a path component")
    for d in cfg["in_domain"]:
        for key in ("train", "test"):
            if key in d:
                _path_component(d[key], f"in_domain[{d['name']}].{key}")
    for t in cfg["ood_testsets"]:
        _path_component(t, "ood_testsets")
    _path_component(str(cfg.get("experiment") or "default"), "experiment", "it names the folder results/<experiment>")
    _distinct_ignoring_case(list(exp.models), "models[].name", "heatmaps/<model>.png, finetune/<model>/, ...")
    _distinct_ignoring_case(list(exp.in_domain), "in_domain[].name", "finetune/<model>/<in-domain>/, ...")
    _distinct_ignoring_case(
        sorted(set(exp.all_datasets())),
        "datasets (in_domain train and test sets, ood_testsets)",
        "data/<dataset>.jsonl, eval/.../<testset>.predictions.parquet, consensus/<test set>.png, forest/...",
    )


def _distinct_ignoring_case(names: list[str], key: str, files: str) -> None:
    """Names that become file names must differ in more than case: on a file system that ignores it
    (macOS, Windows, some network mounts) two such files are one, and one result overwrites the other."""
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
    """A label mode maps dataset labels onto its own labels, and a coarse label collapses some of
    them into one the model does not output."""
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
    """Every dataset named is defined, with a known source; a finetuned model needs the
    finetune block and every in-domain set's training data."""
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
    """An OOD testset may never be a training set, nor (with one in-domain set) its test set.

    With several in-domain sets one OOD list is shared, so an entry equal to a run's
    own in-domain test set is evaluated once for that run, as in-domain (testsets_for).
    """
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


def check_evaluation(exp: Experiment) -> None:
    unit = exp.config["evaluation"]["unit"]
    if unit not in UNITS:
        raise ConfigError(f"evaluation.unit: {unit!r} is not one of {', '.join(UNITS)}")


def check_n_train(exp: Experiment) -> None:
    """Each run trains on ``n_train / len(labels)`` examples of every label, so ``n_train`` must be a
    multiple of the label count, and at least it: refused here, naming the key and the label mode,
    rather than in the finetune job (where 1 with two labels read "not divisible")."""
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
    """The analysis correlates pairs of OOD testsets: a run with fewer than two has none."""
    for d in exp.in_domain:
        ood = [t for t, role in exp.testsets_for(d) if role == "ood"]
        if len(ood) < 2:
            raise ConfigError(
                f"ood_testsets: runs trained on in_domain[{d}] are evaluated on {len(ood)} OOD "
                f"testset(s) {ood}; the analysis correlates pairs of OOD testsets, so list at least "
                "two (besides the in-domain test set)"
            )


def data_source(exp: Experiment, name: str) -> tuple | None:
    """What a dataset's examples are read from, without the settings that only relabel or
    subsample them (so two entries with the same source share their pool of examples): a
    local file (resolved) or a hub split, with its `where` filter; a synthetic stream."""
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
    """An in-domain test set must not be the training set, nor read the same data as it
    (its examples would be drawn from the training pool); nor may an OOD testset."""
    for d, entry in exp.in_domain.items():
        train, test = entry.get("train"), entry["test"]
        if train is None:  # only series models: nothing is trained, no pool to keep apart
            continue
        if test == train:
            raise ConfigError(
                f"in_domain[{d}].test: {test!r} is also its training set (in_domain[{d}].train); "
                "a run would be tested on the pool it was trained from. Give a held-out test set"
            )
        pool = data_source(exp, train)
        if pool is None:
            continue
        if data_source(exp, test) == pool:
            raise ConfigError(
                f"in_domain[{d}].test: dataset {test!r} reads the same data as the training set "
                f"{train!r} ({_describe_source(pool)}), so its examples would come from the training "
                "pool. Give a held-out test set (another file or split, or a `where` that selects "
                "other rows)"
            )
        for t in exp.config["ood_testsets"]:
            if t != train and data_source(exp, t) == pool:
                raise ConfigError(
                    f"ood_testsets: {t!r} reads the same data as the training set {train!r} of "
                    f"in_domain[{d}] ({_describe_source(pool)}); a model cannot be tested out of "
                    "distribution on its own training data"
                )
