"""The checks of each model entry and its prompt that the schema cannot state (called by :mod:`.checks`)."""

from __future__ import annotations

import string
from collections import Counter

from ..core.errors import ConfigError
from ..core.model_entry import MODEL_SOURCES
from .config import HASH_RE, READING_CHOICES, Experiment

PLACEHOLDERS = ("premise", "hypothesis")


def check_models(exp: Experiment) -> list[str]:
    """Each model: one source, a known size class, a pinned hub revision (else a warning), a usable prompt
    (pattern models) or no vocabulary loss (head models), a valid series. Returns the warnings."""
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
                f"models[{m['name']}]: hub revision {m.get('revision') or 'unset'!r} is not a "
                "commit hash, so what loads may change; pin a 40-hex commit, or let "
                "`oodcorr prefetch` pin it in the lock file"
            )
        if m.get("series"):
            warnings += _check_series(exp, m)
        if exp.method(m["name"]) == "pattern":
            _check_prompt(exp, m)
        elif not m.get("series") and exp.finetune_cfg(m["name"]).get("loss") == "vocabulary":
            own = "loss" in (m.get("finetune") or {})
            where = f"models[{m['name']}].finetune.loss" if own else "finetune.loss"
            raise ConfigError(
                f"{where}: vocabulary scores the whole vocabulary at the prompt's scored "
                f"position, which needs method pattern; model {m['name']!r} has method "
                f"{exp.method(m['name'])!r} (use loss: verbalisers)"
            )
    return warnings


def _check_prompt(exp: Experiment, m: dict) -> None:
    """A pattern model's prompt: both fields in the template, known reading switches, a verbaliser per label."""
    prompt = exp.prompt_for(m["name"])
    where = "prompt" if not m.get("prompt") else f"models[{m['name']}].prompt"
    for field in ("{premise}", "{hypothesis}"):
        if field not in prompt["template"]:
            raise ConfigError(f"{where}.template must contain {field}: {prompt['template']!r}")
    for key, choices in READING_CHOICES.items():
        if key in prompt and prompt[key] not in choices:
            raise ConfigError(f"{where}.{key}: {prompt[key]!r} is not one of {', '.join(map(str, choices))}")
    missing = [lab for lab in exp.labels if lab not in prompt["verbalisers"]]
    if missing:
        raise ConfigError(
            f"{where}.verbalisers: no verbaliser for label(s) {missing} "
            f"(label_mode {exp.label_mode['name']!r} predicts {exp.labels})"
        )


def _check_series(exp: Experiment, m: dict) -> list[str]:
    """A series entry: one x-axis kind, strictly increasing; each checkpoint a local directory or a
    revision of ``series.hub`` (unpinned: a warning). Returns the warnings."""
    name, series = m["name"], m["series"]
    where, warnings = f"models[{name}].series", []
    for key in ("finetune", "distributed"):
        if m.get(key):
            raise ConfigError(f"models[{name}].{key}: a series is evaluated as it is, never finetuned; remove `{key}`")
    if exp.method(name) != "pattern":
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
            warnings.append(
                f"{at}: revision {ck['revision']!r} of {series['hub']} is not a commit hash, "
                "so what loads may change; pin a 40-hex commit"
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


def _prompts(exp: Experiment) -> list[tuple[str, dict]]:
    out = [("prompt", exp.config["prompt"])]
    for name, m in exp.models.items():
        if exp.method(name) == "pattern" and m.get("prompt"):
            out.append((f"models[{name}].prompt", exp.prompt_for(name)))
    return out


def _check_template(template: str, key: str) -> None:
    """Only ``{premise}`` and ``{hypothesis}`` placeholders, no single brace (every job would fail)."""
    literal = "write a literal brace as {{ or }}"
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as e:
        raise ConfigError(f"{key}.template: {e} in {template!r}; {literal}") from None
    for _, field, spec, conversion in parsed:
        if field is None:
            continue
        if field in PLACEHOLDERS and not spec and not conversion:
            continue
        shown = "{" + field + (f"!{conversion}" if conversion else "") + (f":{spec}" if spec else "") + "}"
        raise ConfigError(
            f"{key}.template: unknown placeholder {shown} in {template!r}; only {{premise}} and "
            f"{{hypothesis}} are filled in ({literal})"
        )


def check_templates(exp: Experiment) -> None:
    for key, prompt in _prompts(exp):
        _check_template(prompt["template"], key)


def check_verbaliser_words(exp: Experiment) -> None:
    for key, prompt in _prompts(exp):
        words = {lab: prompt["verbalisers"].get(lab) for lab in exp.labels}
        for word, n in Counter(w for w in words.values() if w is not None).items():
            if n > 1:
                labs = [lab for lab, w in words.items() if w == word]
                raise ConfigError(
                    f"{key}.verbalisers: labels {labs} share the verbaliser {word!r}; each label "
                    "needs a word of its own (its own single token)"
                )
