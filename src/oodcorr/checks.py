"""Planning-time checks of what a config decides, and of what is on disk before any job runs.

Each check is a function of its own. Those of the config alone are called by
:func:`oodcorr.plan.build_plan`; they raise :class:`~oodcorr.errors.ConfigError`
naming the key, or return warnings for what is allowed but suspicious:

* :func:`check_templates` -- prompt templates: placeholders other than ``{premise}``
  and ``{hypothesis}``, unbalanced (literal) braces;
* :func:`check_verbaliser_words` -- two labels with the same verbaliser;
* :func:`check_grid` -- a value listed twice in a grid list (``n_train``, ``seeds``,
  the analysis' methods, residualisers and pooling columns);
* :func:`check_ood_count` -- fewer than two OOD testsets for a run (no pair to correlate);
* :func:`check_data_sources` -- an in-domain test set, or an OOD testset, that reads the
  training set's data;
* :func:`check_schedules` -- fewer checkpoints per run than the analysis needs.

Those that look at files are in :mod:`oodcorr.disk_checks` (they read tokenizers and
what jobs wrote, so they sit above the job modules).

Nothing here imports torch, transformers or pandas: planning stays fast.
"""

from __future__ import annotations

import json
import string
from collections import Counter
from collections.abc import Iterable
from typing import Any

from .config import Experiment
from .errors import ConfigError

PLACEHOLDERS = ("premise", "hypothesis")
# a testset (or training sample) with more than this share of its prompts cut to max_length is a warning
TRUNCATION_WARNING = 0.05
# oodcorr.analysis.residualise.GamSettings.min_points (not imported: the analysis package imports
# pandas and scipy, seconds at every planning; tests/test_checks.py checks that the two agree)
GAM_MIN_POINTS = 8


# ---- the config alone ---------------------------------------------------------------------
def _prompts(exp: Experiment) -> list[tuple[str, dict]]:
    """(key, prompt) of the global prompt and of every pattern model's own prompt."""
    out = [("prompt", exp.config["prompt"])]
    for name, m in exp.models.items():
        if exp.method(name) == "pattern" and m.get("prompt"):
            out.append((f"models[{name}].prompt", exp.prompt_for(name)))
    return out


def check_template(template: str, key: str) -> None:
    """A template is filled with ``str.format(premise=..., hypothesis=...)``: any other
    placeholder, or a single brace, would fail in every job that reads it (a bare KeyError)."""
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
        check_template(prompt["template"], key)


def check_verbaliser_words(exp: Experiment) -> None:
    """Two labels with one verbaliser could never be told apart, whatever the tokenizer."""
    for key, prompt in _prompts(exp):
        words = {lab: prompt["verbalisers"].get(lab) for lab in exp.labels}
        for word, n in Counter(w for w in words.values() if w is not None).items():
            if n > 1:
                labs = [lab for lab, w in words.items() if w == word]
                raise ConfigError(
                    f"{key}.verbalisers: labels {labs} share the verbaliser {word!r}; each label "
                    "needs a word of its own (its own single token)"
                )


def _duplicates(values: Iterable, key: str, what: str) -> None:
    values = list(values)
    twice = [v for v, n in Counter(values).items() if n > 1]
    if twice:
        raise ConfigError(f"{key}: {twice[0]!r} is listed more than once ({values}); {what}")


def check_grid(exp: Experiment) -> None:
    """A value listed twice in a grid list would plan its runs twice (duplicate score rows) or
    compute its analysis twice."""
    blocks = [("finetune", exp.config.get("finetune") or {})]
    blocks += [(f"models[{n}].finetune", m["finetune"]) for n, m in exp.models.items() if m.get("finetune")]
    for key, ft in blocks:
        for grid in ("n_train", "seeds"):
            if grid in ft:
                _duplicates(ft[grid], f"{key}.{grid}", "each value is a run of its own; list it once")
    analysis = exp.config.get("analysis") or {}
    for grid in ("methods", "residualisers"):
        if grid in analysis:
            _duplicates(analysis[grid], f"analysis.{grid}", "list it once")
    by = (analysis.get("pooling") or {}).get("by")
    if by:
        _duplicates(by, "analysis.pooling.by", "list it once")


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


def analysis_min_points(residualiser: str, gam_min_points: int = GAM_MIN_POINTS) -> int:
    """Checkpoints a run needs for one residualiser's cells to be computed: k + 3 with k
    covariates (in-domain score, plus the step with ``+step``) for OLS, at least
    ``gam.min_points`` for a GAM (the rule of oodcorr.analysis.correlate.min_points)."""
    need = (2 if residualiser.endswith("+step") else 1) + 3
    return max(need, gam_min_points) if residualiser.startswith("gam") else need


def check_schedules(runs: Iterable[Any], analysis: dict) -> list[str]:
    """Fewer checkpoints than every residualiser needs: every cell of the run would be NaN, an
    error; fewer than some residualiser needs: that residualiser's cells are NaN, a warning.

    ``runs`` are the plan's runs (:class:`oodcorr.plan.Run`: model, n_train, steps, max_steps,
    series); not imported here, since the plan imports this module."""
    residualisers = list(analysis.get("residualisers") or ["linear"])
    gam_min = int((analysis.get("gam") or {}).get("min_points", GAM_MIN_POINTS))
    drop0 = bool((analysis.get("step0") or {}).get("drop", False))
    need = {r: analysis_min_points(r, gam_min) for r in residualisers}
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
