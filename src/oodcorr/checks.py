"""Planning-time checks of what a config decides, and of what is on disk before any job runs.

Each check is a function of its own. Those of the config alone are called by
:func:`oodcorr.plan.build_plan`; they raise :class:`~oodcorr.config.ConfigError`
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

Those that look at files are called by :meth:`oodcorr.plan.Plan.check_on_disk` (the
Snakefile, while planning):

* :func:`check_verbalisers_on_disk` -- verbalisers against every tokenizer already on
  disk (local, packaged and built models);
* :func:`check_sources_unchanged` -- a local dataset file edited in place with its
  modification time kept (Snakemake would keep evaluations of the old file);
* :func:`check_summaries_complete` -- with ``evaluation.unit: run``, a job summary
  whose predictions files are gone;
* :func:`truncation_warnings` -- testsets and training sets whose prompts were cut.

Nothing here imports torch, transformers or pandas: planning stays fast.
"""
from __future__ import annotations

import json
import os
import string
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

from .config import ConfigError, Experiment
from .io import DataError

if TYPE_CHECKING:
    from .plan import Plan, Run

PLACEHOLDERS = ("premise", "hypothesis")
# a testset (or training sample) with more than this share of its prompts cut to max_length is a warning
TRUNCATION_WARNING = 0.05
# oodcorr.analysis.residualise.GamSettings.min_points (not imported: the analysis package imports
# pandas and scipy, seconds at every planning; tests/test_checks.py checks that the two agree)
GAM_MIN_POINTS = 8


class StaleResult(RuntimeError):
    """A result on disk that no longer matches what it lists or was made from, which Snakemake
    would not rebuild by itself; the message names it and the command that rebuilds it."""


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
        raise ConfigError(f"{key}.template: unknown placeholder {shown} in {template!r}; only {{premise}} and "
                          f"{{hypothesis}} are filled in ({literal})")


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
                raise ConfigError(f"{key}.verbalisers: labels {labs} share the verbaliser {word!r}; each label "
                                  "needs a word of its own (its own single token)")


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
            raise ConfigError(f"ood_testsets: runs trained on in_domain[{d}] are evaluated on {len(ood)} OOD "
                              f"testset(s) {ood}; the analysis correlates pairs of OOD testsets, so list at least "
                              "two (besides the in-domain test set)")


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
            raise ConfigError(f"in_domain[{d}].test: {test!r} is also its training set (in_domain[{d}].train); "
                              "a run would be tested on the pool it was trained from. Give a held-out test set")
        pool = data_source(exp, train)
        if pool is None:
            continue
        if data_source(exp, test) == pool:
            raise ConfigError(f"in_domain[{d}].test: dataset {test!r} reads the same data as the training set "
                              f"{train!r} ({_describe_source(pool)}), so its examples would come from the training "
                              "pool. Give a held-out test set (another file or split, or a `where` that selects "
                              "other rows)")
        for t in exp.config["ood_testsets"]:
            if t != train and data_source(exp, t) == pool:
                raise ConfigError(f"ood_testsets: {t!r} reads the same data as the training set {train!r} of "
                                  f"in_domain[{d}] ({_describe_source(pool)}); a model cannot be tested out of "
                                  "distribution on its own training data")


def analysis_min_points(residualiser: str, gam_min_points: int = GAM_MIN_POINTS) -> int:
    """Checkpoints a run needs for one residualiser's cells to be computed: k + 3 with k
    covariates (in-domain score, plus the step with ``+step``) for OLS, at least
    ``gam.min_points`` for a GAM (the rule of oodcorr.analysis.correlate.min_points)."""
    need = (2 if residualiser.endswith("+step") else 1) + 3
    return max(need, gam_min_points) if residualiser.startswith("gam") else need


def check_schedules(runs: "Iterable[Run]", analysis: dict) -> list[str]:
    """Fewer checkpoints than every residualiser needs: every cell of the run would be NaN, an
    error; fewer than some residualiser needs: that residualiser's cells are NaN, a warning."""
    residualisers = list(analysis.get("residualisers") or ["linear"])
    gam_min = int((analysis.get("gam") or {}).get("min_points", GAM_MIN_POINTS))
    drop0 = bool((analysis.get("step0") or {}).get("drop", False))
    need = {r: analysis_min_points(r, gam_min) for r in residualisers}
    warnings, seen = [], set()
    for run in runs:
        n = len(run.steps) - (1 if drop0 and 0 in run.steps else 0)
        key = (f"models[{run.model}].series.checkpoints" if run.series
               else f"finetune.checkpoints (model {run.model}, n_train {run.n_train})")
        counted = f"{n} checkpoint(s) {list(run.steps)}" + (" without step 0 (analysis.step0.drop)" if drop0 else "")
        if n < min(need.values()):
            fewest = min(need.values())
            every = run.max_steps // (fewest - (0 if drop0 else 1))
            hint = f" (`every: {every}` gives {fewest})" if every >= 1 and not run.series else ""
            raise ConfigError(f"{key}: a run of {run.max_steps} steps saves {counted}, but the analysis needs at "
                              f"least {fewest} per run ({', '.join(f'{r}: {k}' for r, k in need.items())}), so "
                              f"every cell would be NaN; {'list more checkpoints' if run.series else 'save checkpoints more often'}{hint}")
        short = [r for r, k in need.items() if n < k]
        if short and (run.model, run.n_train) not in seen:
            seen.add((run.model, run.n_train))
            warnings.append(f"{key}: runs save {counted}; the {', '.join(short)} residualiser(s) need "
                            f"{', '.join(str(need[r]) for r in short)}, so their cells will be NaN")
    return warnings


# ---- what is on disk -----------------------------------------------------------------------
def tokenizer_dir(plan: "Plan", model: str) -> Path | None:
    """Where a model's tokenizer is while planning: a local or packaged model's folder, or a
    tiny model's once built; None for hub models and tiny models not built yet."""
    spec = plan.models[model]
    if spec.source == "path":
        return Path(spec.entry["path"])
    if spec.source == "package":
        from .models import package_dir

        return package_dir(spec.entry)
    if spec.is_tiny:
        return Path(plan.tiny_dir(model))
    return None


def _quick_verbaliser_problem(tokenizer_json: Path, verbalisers: dict, labels: list[str]) -> bool:
    """Whether the tokenizer file, read by the `tokenizers` library alone (milliseconds), splits a
    verbaliser or maps two to one token. Only a hint: transformers may set the tokenizer up
    differently, so a problem found here is confirmed with the jobs' own code."""
    from tokenizers import Tokenizer

    try:
        tok = Tokenizer.from_file(str(tokenizer_json))
        ids = [tok.encode(verbalisers[lab], add_special_tokens=False).ids for lab in labels]
    except Exception:  # noqa: BLE001 -- unreadable here: let the exact check decide
        return True
    return any(len(x) != 1 for x in ids) or len({x[0] for x in ids}) != len(ids)


def check_verbalisers_on_disk(plan: "Plan") -> None:
    """Each verbaliser must be one token, and the labels' tokens distinct, for every tokenizer:
    checked while planning for every tokenizer already on disk, so that a bad word stops the
    run before any job (and not in the first job that loads the tokenizer, after the tiny
    model was rebuilt). Models with their own code (``trust_remote_code``) are left to their
    jobs: planning runs no model's code."""
    for name, spec in plan.models.items():
        if spec.method != "pattern" or not spec.prompt or spec.entry.get("trust_remote_code"):
            continue
        d = tokenizer_dir(plan, name)
        if d is None or not (d / "tokenizer.json").is_file():
            continue
        if not _quick_verbaliser_problem(d / "tokenizer.json", spec.prompt["verbalisers"], list(plan.labels)):
            continue
        from .models import load_tokenizer
        from .prompting import verbaliser_ids

        # the jobs' own code (transformers, seconds): raises the jobs' ConfigError naming the label and model
        verbaliser_ids(load_tokenizer(spec.entry, plan.tiny_dir(name)), spec.prompt["verbalisers"],
                       list(plan.labels), name)


def check_sources_unchanged(plan: "Plan") -> None:
    """A local dataset file whose bytes changed since it was prepared, while its modification
    time is not newer than the prepared copy, would keep its old evaluations: Snakemake
    reruns a job only when an input is newer. Refused, with the command that reruns them."""
    from .data import local_source_changed

    for name in plan.datasets:
        meta_path = Path(plan.paths.data_meta.format(dataset=name))
        data_path = Path(plan.paths.data.format(dataset=name))
        if plan.exp.dataset(name).get("source") != "local" or not (meta_path.is_file() and data_path.is_file()):
            continue
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # a damaged meta file: its preparation is redone when an input changes; nothing to compare
        source = plan.exp.dataset_input(name)
        if not source or str(meta.get("path")) != source[0] or not os.path.isfile(source[0]):
            continue  # the entry points at another file: the changed input reruns the preparation
        if os.stat(source[0]).st_mtime > min(meta_path.stat().st_mtime, data_path.stat().st_mtime):
            continue  # newer than the prepared copy: Snakemake prepares it again
        changed = local_source_changed(meta)
        if changed:
            raise DataError(f"{changed}, but its modification time is older than the prepared copy "
                            f"{data_path}, so Snakemake would keep the results of the old file. Run `touch "
                            f"{source[0]}` and run again: the testset is prepared, tokenised and evaluated again")


def check_summaries_complete(plan: "Plan") -> None:
    """``evaluation.unit: run``: a job summary whose predictions files are gone.

    The job declares only its summary (Snakemake deletes a job's declared outputs before it
    runs, and the job keeps the predictions files it finds, so they cannot be outputs), and
    Snakemake reruns a job only for its outputs, inputs and params: a deleted predictions
    file alone never reruns it. Refused while planning with the one command that does,
    unless the job runs again anyway (a newer checkpoint manifest or tokenised testset, or
    another schedule)."""
    if plan.unit != "run":
        return
    stale: dict[str, list[str]] = {}
    for job in plan.eval_jobs:
        summary = plan.paths.eval_summary.format(**job.run.wildcards, testset=job.testset)
        if not os.path.exists(summary):
            continue
        wanted = [plan.predictions_path(job.run, s, job.testset) for s in job.steps]
        if all(os.path.exists(p) for p in wanted):
            continue
        inputs = [plan.paths.manifest.format(**job.run.wildcards),
                  plan.paths.tokenized.format(model=job.run.model, testset=job.testset)]
        t_summary = os.stat(summary).st_mtime
        if any(not os.path.exists(p) or os.stat(p).st_mtime > t_summary for p in inputs):
            continue  # Snakemake runs the job again anyway
        try:
            doc = json.loads(Path(summary).read_text(encoding="utf-8"))
            listed = [(int(r["step"]), str(r["predictions"])) for r in doc["checkpoints"]]
        except (OSError, ValueError, KeyError, TypeError):
            continue  # unreadable: the aggregation names it
        if [s for s, _ in listed] != list(job.steps):
            continue  # another schedule: its params changed, so it runs again
        gone = [p for _, p in listed if not os.path.exists(p)]
        if gone:
            stale[summary] = gone
    if stale:
        lines = [f"{s}: lists {len(g)} predictions file(s) that are gone ({', '.join(g[:2])}"
                 f"{', ...' if len(g) > 2 else ''})" for s, g in sorted(stale.items())]
        shown = lines[:5] + ([f"... and {len(lines) - 5} more summaries"] if len(lines) > 5 else [])
        raise StaleResult(
            "evaluation summaries list predictions files that are gone, and Snakemake would not run their "
            "jobs again (a job of evaluation.unit run declares only its summary):\n  " + "\n  ".join(shown) +
            f"\nDelete those summaries and run again (`rm {' '.join(sorted(stale))}`): each job keeps the "
            "predictions files it finds and scores only the missing checkpoints")


def truncation_warnings(plan: "Plan") -> list[str]:
    """Testsets (per model's tokenizer) and training samples with more than
    ``TRUNCATION_WARNING`` of their prompts cut to ``max_length``: from each tokenised
    cache's sidecar (``<testset>.info.json``) and each finished run's manifest, as far as
    they exist (at planning: from earlier runs; at the end of a run: all of them)."""
    from .evaluate import cache_info_path

    out = []
    for model in plan.models:
        for testset in sorted({t for ts in plan.testsets.values() for t, _ in ts}):
            info_path = cache_info_path(plan.paths.tokenized.format(model=model, testset=testset))
            try:
                info = json.loads(Path(info_path).read_text(encoding="utf-8"))
                n, cut = int(info["n"]), int(info["n_truncated"])
            except (OSError, ValueError, KeyError, TypeError):
                continue
            if n and cut / n > TRUNCATION_WARNING:
                out.append(f"testset {testset!r}, model {model!r}: {cut} of {n} prompts ({cut / n:.0%}) are longer "
                           f"than evaluation.max_length ({info.get('max_length')} tokens) and were cut, keeping "
                           "their end; raise evaluation.max_length to score whole examples")
    for run in plan.runs:
        manifest = Path(plan.paths.manifest.format(**run.wildcards))
        try:
            info = json.loads(manifest.read_text(encoding="utf-8"))
            cut = int(info.get("n_truncated_prompts") or 0)
        except (OSError, ValueError, TypeError):
            continue
        if run.n_train and cut / run.n_train > TRUNCATION_WARNING:
            out.append(f"run {run.id}: {cut} of {run.n_train} training prompts ({cut / run.n_train:.0%}) are longer "
                       f"than finetune.max_length ({plan.models[run.model].finetune.get('max_length')} tokens) and "
                       "were cut; raise finetune.max_length")
    return out
