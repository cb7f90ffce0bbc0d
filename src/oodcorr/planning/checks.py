"""The checks of what a config decides that its schema cannot state, each raising ConfigError naming the key
or returning warnings; what is on disk is :mod:`oodcorr.launch.disk_checks`."""

from __future__ import annotations

import difflib
import json
import string
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from ..core.defaults import ANALYSIS
from ..core.errors import ConfigError
from ..core.limits import analysis_cells, analysis_too_large
from ..core.model_entry import MODEL_SOURCES
from .config import DATASET_SOURCES, HASH_RE, Experiment

# a testset (or training sample) with more than this share of its prompts cut to max_length is a warning
TRUNCATION_WARNING = 0.05


def check_config(exp: Experiment) -> list[str]:
    """Every check of the config alone, in the order a reader fixes them; returns the warnings."""
    _check_label_mode(exp)
    _check_names(exp)
    _check_datasets(exp)
    _check_ood_overlap(exp)
    warnings = _check_models(exp)
    _check_prompts(exp)
    _check_n_train(exp)
    _check_ood_count(exp)
    _check_data_sources(exp)
    return warnings


def _check_names(exp: Experiment) -> None:
    """Names are listed once and differ in more than case (the schema makes them path components)."""
    cfg = exp.config
    for key, names in (
        ("models[].name", [m["name"] for m in cfg["models"]]),
        ("in_domain[].name", [d["name"] for d in cfg["in_domain"]]),
        ("ood_testsets", cfg["ood_testsets"]),
    ):
        twice = [x for i, x in enumerate(names) if x in names[:i]]
        if twice:
            raise ConfigError(f"{key}: duplicate name {twice[0]!r}")
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
                f"{key}: {other!r} and {n!r} differ only in case; they name files ({files}), one file where the "
                "file system ignores case (macOS, Windows). Rename one"
            )


def _check_label_mode(exp: Experiment) -> None:
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
                f"label_modes.{name}.coarse.{coarse}: must be a label not output, collapsing labels among "
                f"{mode['labels']} (got {preds})"
            )


def _known_dataset(exp: Experiment, name: str, key: str) -> None:
    if name not in exp.datasets:
        near = difflib.get_close_matches(name, list(exp.datasets), n=3)
        hint = f"; did you mean {', '.join(map(repr, near))}?" if near else ""
        raise ConfigError(f"{key}: dataset {name!r} is not defined in `datasets` or any file in `registries`{hint}")


def _check_datasets(exp: Experiment) -> None:
    """Every dataset named is defined, with a known source; a finetuned model needs finetune and training data."""
    cfg = exp.config
    finetuned = exp.finetuned_models()
    if finetuned and not cfg.get("finetune"):
        raise ConfigError(f"finetune: missing; model(s) {finetuned} are finetuned (only `series` models need none)")
    for d in cfg["in_domain"]:
        if "train" not in d and finetuned:
            raise ConfigError(f"in_domain[{d['name']}].train: missing; model(s) {finetuned} are finetuned on it")
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


def _check_ood_overlap(exp: Experiment) -> None:
    """An OOD testset is never a training set, nor (with one in-domain set) its test set."""
    ood = exp.config["ood_testsets"]
    in_domain = exp.config["in_domain"]
    for d in in_domain:
        if d.get("train") in ood:
            raise ConfigError(f"ood_testsets: {d['train']!r} is the training set of in_domain[{d['name']}]; remove it")
    if len(in_domain) == 1 and in_domain[0]["test"] in ood:
        d = in_domain[0]
        raise ConfigError(f"ood_testsets: {d['test']!r} is the in-domain test set of in_domain[{d['name']}]; remove it")


def _check_n_train(exp: Experiment) -> None:
    """Each run trains on ``n_train / len(labels)`` examples of every label: a multiple of the label count."""
    labels = exp.labels
    k = len(labels)
    mode = exp.config.get("label_mode", "binary")
    for m in exp.finetuned_models():
        over = (exp.models[m].get("finetune") or {}).get("n_train")
        key = f"models[{m}].finetune.n_train" if over is not None else "finetune.n_train"
        for n in exp.finetune_cfg(m).get("n_train") or []:
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


def _check_ood_count(exp: Experiment) -> None:
    for d in exp.in_domain:
        ood = [t for t, role in exp.testsets_for(d) if role == "ood"]
        if len(ood) < 2:
            raise ConfigError(
                f"ood_testsets: runs trained on in_domain[{d}] are evaluated on {len(ood)} OOD testset(s) {ood}; "
                "list at least two to correlate (besides the in-domain test set)"
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


def _check_data_sources(exp: Experiment) -> None:
    """Neither an in-domain test set nor an OOD testset reads the training set's data."""
    for d, entry in exp.in_domain.items():
        train, test = entry.get("train"), entry["test"]
        if train is None:  # only series models: nothing is trained, no pool to keep apart
            continue
        if test == train:
            raise ConfigError(
                f"in_domain[{d}].test: {test!r} is also its training set (in_domain[{d}].train); "
                "give a held-out test set"
            )
        pool = _data_source(exp, train)
        if pool is None:
            continue
        if _data_source(exp, test) == pool:
            raise ConfigError(
                f"in_domain[{d}].test: dataset {test!r} reads the same data as the training set "
                f"{train!r} ({_describe_source(pool)}). Give a held-out test set (another file or split, "
                "or a `where` that selects other rows)"
            )
        for t in exp.config["ood_testsets"]:
            if t != train and _data_source(exp, t) == pool:
                raise ConfigError(
                    f"ood_testsets: {t!r} reads the same data as the training set {train!r} of "
                    f"in_domain[{d}] ({_describe_source(pool)}); remove it"
                )


# ---- each model entry and its prompt
def _check_models(exp: Experiment) -> list[str]:
    """Each model entry, its prompt and its series; returns the warnings (unpinned hub revisions)."""
    cfg, warnings = exp.config, []
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
            warnings.append(
                f"models[{m['name']}]: hub revision {m.get('revision') or 'unset'!r} is not a commit hash; "
                "pin a 40-hex commit, or let `oodcorr prefetch` pin it in the lock file"
            )
        if m.get("series"):
            warnings += _check_series(exp, m)
        if exp.method(m["name"]) == "pattern":
            _check_prompt(exp, m)
        elif not m.get("series") and exp.finetune_cfg(m["name"]).get("loss") == "vocabulary":
            own = "loss" in (m.get("finetune") or {})
            where = f"models[{m['name']}].finetune.loss" if own else "finetune.loss"
            raise ConfigError(
                f"{where}: vocabulary scores the whole vocabulary, which needs method pattern; model {m['name']!r} "
                f"has method {exp.method(m['name'])!r} (use loss: verbalisers)"
            )
    return warnings


def _check_prompt(exp: Experiment, m: dict) -> None:
    """A pattern model's prompt: both fields in the template, a verbaliser per label."""
    prompt = exp.prompt_for(m["name"])
    where = "prompt" if not m.get("prompt") else f"models[{m['name']}].prompt"
    for field in ("{premise}", "{hypothesis}"):
        if field not in prompt["template"]:
            raise ConfigError(f"{where}.template must contain {field}: {prompt['template']!r}")
    missing = [lab for lab in exp.labels if lab not in prompt["verbalisers"]]
    if missing:
        raise ConfigError(
            f"{where}.verbalisers: no verbaliser for label(s) {missing} "
            f"(label_mode {exp.label_mode['name']!r} predicts {exp.labels})"
        )


def _check_series(exp: Experiment, m: dict) -> list[str]:
    """A series entry and its checkpoints; returns the warnings (unpinned revisions)."""
    name, series = m["name"], m["series"]
    where, warnings = f"models[{name}].series", []
    for key in ("finetune", "distributed"):
        if m.get(key):
            raise ConfigError(f"models[{name}].{key}: a series is evaluated as it is, never finetuned; remove `{key}`")
    if exp.method(name) != "pattern":
        raise ConfigError(
            f"models[{name}].method: a series is scored with the prompt (method pattern); method head is not supported"
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
                f"{at}: give exactly one of `path` (a local directory) or `revision`, got {src or 'none'}"
            )
        if src[0] == "revision" and not series.get("hub"):
            raise ConfigError(f"{at}.revision: needs {where}.hub, the repository it is a revision of")
        if src[0] == "path" and series.get("hub"):
            raise ConfigError(f"{at}.path: {where}.hub is set; give `revision`, or drop `hub` for local directories")
        if src[0] == "revision" and not HASH_RE.match(str(ck["revision"])):
            warnings.append(
                f"{at}: revision {ck['revision']!r} of {series['hub']} is not a commit hash; pin a 40-hex commit"
            )
    if len(kinds) > 1:
        raise ConfigError(f"{where}.checkpoints: mixes `step` and `tokens`; one x-axis per series")
    xs = exp.series_x(name)
    if any(b <= a for a, b in zip(xs, xs[1:])):
        raise ConfigError(f"{where}.checkpoints: the {next(iter(kinds))} values must be strictly increasing, got {xs}")
    for d in series.get("in_domain") or []:
        if d not in exp.in_domain:
            raise ConfigError(f"{where}.in_domain: {d!r} is not an in_domain name (known: {', '.join(exp.in_domain)})")
    return warnings


def _check_prompts(exp: Experiment) -> None:
    """Each prompt: only ``{premise}`` and ``{hypothesis}`` placeholders, no single brace (every job would fail),
    and a verbaliser word of its own per label."""
    literal = "write a literal brace as {{ or }}"
    prompts = [("prompt", exp.config["prompt"])]
    for name, m in exp.models.items():
        if exp.method(name) == "pattern" and m.get("prompt"):
            prompts.append((f"models[{name}].prompt", exp.prompt_for(name)))
    for key, prompt in prompts:
        template = prompt["template"]
        try:
            parsed = list(string.Formatter().parse(template))
        except ValueError as e:
            raise ConfigError(f"{key}.template: {e} in {template!r}; {literal}") from None
        for _, field, spec, conversion in parsed:
            if field is None or (field in ("premise", "hypothesis") and not spec and not conversion):
                continue
            shown = "{" + field + (f"!{conversion}" if conversion else "") + (f":{spec}" if spec else "") + "}"
            raise ConfigError(
                f"{key}.template: unknown placeholder {shown} in {template!r}; only {{premise}} and "
                f"{{hypothesis}} are filled in ({literal})"
            )
        words = {lab: prompt["verbalisers"].get(lab) for lab in exp.labels}
        for word, n in Counter(w for w in words.values() if w is not None).items():
            if n > 1:
                labs = [lab for lab, w in words.items() if w == word]
                raise ConfigError(
                    f"{key}.verbalisers: labels {labs} share the verbaliser {word!r}; give each its own word"
                )


# ---- what the plan built: the models' resources and the runs
def check_placement(models: Mapping[str, Any]) -> None:
    """A partition or account is set for all of a rule's jobs or for none (a job without would get none at all,
    not the profile's)."""
    rules = next(iter(models.values())).resources if models else {}
    for rule in rules:
        for key in ("slurm_partition", "slurm_account"):  # what a profile's default-resources set
            have = {
                m: spec.resources[rule] for m, spec in models.items() if getattr(spec.resources[rule], key) is not None
            }
            if have and len(have) < len(models):
                missing = sorted(set(models) - set(have))
                first = next(iter(have.values())).where(key)
                raise ConfigError(
                    f"{first}: {key} is set for the {rule} jobs of {', '.join(sorted(have))} but not for those "
                    f"of {', '.join(missing)}, which would get none. Set it for all of them, e.g. "
                    f"resources.default.{key} or resources.{rule}.{key}"
                )


def analysis_min_points(residualiser: str, gam_min_points: int = ANALYSIS["gam"]["min_points"]) -> int:
    """Checkpoints a run needs for a residualiser's cells: k + 3 with k covariates; a GAM ``min_points``."""
    need = (2 if residualiser.endswith("+step") else 1) + 3
    return max(need, gam_min_points) if residualiser.startswith("gam") else need


def check_schedules(runs: Iterable[Any], analysis: dict) -> list[str]:
    """Fewer checkpoints than every residualiser needs is an error (every cell NaN); than some, a warning."""
    gam_min = int(analysis["gam"]["min_points"])
    drop0 = bool(analysis["step0"]["drop"])
    need = {r: analysis_min_points(r, gam_min) for r in analysis["residualisers"]}
    warnings, seen = [], set()
    for run in runs:
        n = len(run.steps) - (1 if drop0 and 0 in run.steps else 0)
        key = (
            f"models[{run.model}].series.checkpoints"
            if run.series
            else f"finetune.checkpoints (model {run.model}, n_train {run.n_train})"
        )
        counted = f"{n} checkpoint(s) {list(run.steps)}" + (" without step 0 (analysis.step0.drop)" if drop0 else "")
        if n < min(need.values()):
            fewest = min(need.values())
            every = run.max_steps // (fewest - (0 if drop0 else 1))
            hint = f" (`every: {every}` gives {fewest})" if every >= 1 and not run.series else ""
            more = "list more checkpoints" if run.series else "save checkpoints more often"
            raise ConfigError(
                f"{key}: a run of {run.max_steps} steps saves {counted}, but the analysis needs at "
                f"least {fewest} per run ({', '.join(f'{r}: {k}' for r, k in need.items())}), so "
                f"every cell would be NaN; {more}{hint}"
            )
        short = [r for r, k in need.items() if n < k]
        if short and (run.model, run.n_train) not in seen:
            seen.add((run.model, run.n_train))
            warnings.append(
                f"{key}: runs save {counted}; the {', '.join(short)} residualiser(s) need "
                f"{', '.join(str(need[r]) for r in short)}, so their cells will be NaN"
            )
    return warnings


def check_analysis_size(runs: Iterable[Any], testsets: Mapping[str, Iterable[tuple[str, str]]], analysis: dict) -> None:
    """An analysis of more cells (each run's OOD pairs x methods x residualisers) than ``analysis.max_cells``,
    refused while planning rather than hours into the analysis job."""
    n_ood = {d: sum(1 for _, role in ts if role != "in-domain") for d, ts in testsets.items()}
    cells, detail = analysis_cells(
        [n_ood.get(run.in_domain, 0) for run in runs], len(analysis["methods"]), len(analysis["residualisers"])
    )
    limit = int(analysis["max_cells"])
    if cells > limit:
        raise ConfigError(
            "analysis.max_cells: "
            + analysis_too_large(
                cells,
                detail,
                limit,
                what="the analysis of this config",
                limit_name="analysis.max_cells" + (" (its default)" if limit == ANALYSIS["max_cells"] else ""),
                fewer="ood_testsets, analysis.methods or analysis.residualisers",
                allow=f"set `analysis: {{max_cells: {cells}}}`",
            )
        )
