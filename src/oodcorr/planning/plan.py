"""The plan: every job an experiment asks for, as typed, frozen objects built once from the config.

The Snakefile builds one :class:`Plan` and the rules read only it: targets, params (one callable per
rule, cached per job), threads and resources (:meth:`Plan.rule_resources`)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, ClassVar

from ..core import limits
from ..core.defaults import RESOURCES
from ..core.digests import canonical
from ..core.errors import ConfigError
from ..core.model_dirs import model_files
from ..core.model_entry import ModelEntry
from . import checks, schema
from .config import Experiment, analysis_options
from .layout import Paths
from .rule_callables import Resources, model_resources, rule_callable, rule_resources, rule_threads

# The analysis tables' format, a param of the analysis rule: raise it when their columns or verdicts
# change, so an analysed experiment recomputes its analysis and nothing upstream (tests/meta ties it).
ANALYSIS_FORMAT = 6

# the rules whose jobs run one model, each with its own resources (defaults: RESOURCES)
MODEL_RULES = tuple(RESOURCES)


@dataclass(frozen=True)
class ModelSpec:
    """A model entry resolved against the global config's blocks."""

    name: str
    model_entry: ModelEntry  # the entry minus what changes no result (Experiment.model_entry)
    finetune: dict  # the finetune settings of its runs (global block with its overrides), no n_train/seeds
    prompt: dict | None  # None for methods that read no prompt
    distributed: dict | None
    resources: Mapping[str, Resources]  # per rule in MODEL_RULES
    checkpoints: Mapping[int, dict] | None = None  # series only: x value -> {"path"} or {"hub", "revision"}
    x_unit: str = "step"  # what the x-axis counts: step (finetuned, or a series' steps) or tokens
    params_b: float | None = None  # the entry's parameter count for planning (oodcorr.launch.sizing), if given

    @property
    def lora(self) -> bool:
        return bool(self.finetune.get("lora"))


@dataclass(frozen=True)
class Run:
    """One finetuning run: model x in-domain set x n_train x data seed."""

    model: str
    in_domain: str
    n_train: int
    seed: int
    steps: tuple[int, ...]  # checkpoints saved and evaluated, 0 (the start) first; a series' x values
    max_steps: int
    series: bool = False  # the model's checkpoints are given (no finetune job), n_train and seed are 0

    @property
    def id(self) -> str:
        return f"{self.model}/{self.in_domain}/n{self.n_train}/seed{self.seed}"

    @property
    def wildcards(self) -> dict[str, str]:
        return {"model": self.model, "indomain": self.in_domain, "ntrain": str(self.n_train), "seed": str(self.seed)}


@dataclass(frozen=True)
class EvalJob:
    """One evaluation job: a run's checkpoints ``steps`` scored on one testset."""

    run: Run
    testset: str
    role: str  # in-domain | ood
    steps: tuple[int, ...]


def _checkpoint_steps(ft: Mapping[str, Any], max_steps: int, where: str) -> tuple[int, ...]:
    """Steps at which a run is saved and evaluated, step 0 (the start) included."""
    sched = ft["checkpoints"]
    if "every" in sched:  # the schema's other form: `steps`, a list of one or more
        every = int(sched["every"])
        return tuple(sorted({0, *range(every, max_steps + 1, every), max_steps}))
    steps = [int(s) for s in sched["steps"]]
    if any(b <= a for a, b in zip(steps, steps[1:])):
        raise ConfigError(f"{where}: steps must be strictly increasing, got {steps}")
    if steps[-1] > max_steps:
        raise ConfigError(f"{where}: step {steps[-1]} is beyond the run's {max_steps} training steps")
    return tuple(steps if steps[0] == 0 else [0, *steps])


@dataclass(frozen=True)
class Plan:
    """Everything the rules need, computed once from the validated config."""

    experiment: str
    unit: str
    paths: Paths
    labels: tuple[str, ...]
    label_mode: dict
    models: Mapping[str, ModelSpec]
    runs: tuple[Run, ...]
    testsets: Mapping[str, tuple[tuple[str, str], ...]]  # in-domain set -> ((testset, role), ...)
    train_set: Mapping[str, str]  # in-domain set -> its training dataset
    datasets: tuple[str, ...]  # every dataset the experiment uses (any registry entry can be prepared)
    pretraining: dict  # the pretraining corpus's settings, template and answers (tiny models)
    analysis: dict  # the statistics' settings (oodcorr.analysis.Options), without `score`
    score: str  # the scores-table column the analysis correlates and plots (analysis.score)
    warnings: tuple[str, ...]
    exp: Experiment = field(repr=False, compare=False)
    _cache: dict = field(default_factory=dict, repr=False, compare=False)
    analysis_format: ClassVar[int] = ANALYSIS_FORMAT

    @cached_property
    def _runs_by_key(self) -> dict[tuple, Run]:
        return {(r.model, r.in_domain, str(r.n_train), str(r.seed)): r for r in self.runs}

    def run(self, wildcards) -> Run:
        return self._runs_by_key[(wildcards.model, wildcards.indomain, wildcards.ntrain, wildcards.seed)]

    @cached_property
    def eval_jobs(self) -> tuple[EvalJob, ...]:
        """Every evaluation job: a run x testset x step (unit ``checkpoint``) or x all steps (``run``)."""
        return tuple(
            EvalJob(run, testset, role, steps)
            for run in self.runs
            for testset, role in self.testsets[run.in_domain]
            for steps in ([run.steps] if self.unit == "run" else [(s,) for s in run.steps])
        )

    def eval_outputs(self) -> list[str]:
        """What the aggregation reads: every predictions file (``checkpoint``) or job summary (``run``)."""
        if self.unit == "run":
            return [self.paths.eval_summary.format(**j.run.wildcards, testset=j.testset) for j in self.eval_jobs]
        return [self.predictions_path(j.run, j.steps[0], j.testset) for j in self.eval_jobs]

    def predictions_path(self, run: Run, step: int, testset: str) -> str:
        return self.paths.predictions.format(**run.wildcards, step=step, testset=testset)

    def consensus_sets(self) -> list[str]:
        """The in-domain test sets (as the tables name them) whose runs come from 2 or more models."""
        models: dict[str, set[str]] = {}
        for r in self.runs:
            test = self.testsets[r.in_domain][0][0]  # the in-domain test set comes first
            models.setdefault(test, set()).add(r.model)
        return sorted(d for d, ms in models.items() if len(ms) >= 2)

    def forest_pairs(self) -> dict[str, list[tuple[str, str]]]:
        """The OOD pairs (x, y), x before y, of each in-domain test set with a consensus: one forest plot each."""
        ood: dict[str, set[str]] = {}
        for r in self.runs:
            names = [t for t, _ in self.testsets[r.in_domain]]
            ood.setdefault(names[0], set()).update(names[1:])  # the in-domain test set comes first
        return {d: list(itertools.combinations(sorted(ood[d]), 2)) for d in self.consensus_sets()}

    def forest_figures(self) -> list[tuple[str, dict]]:
        """Each staged forest plot (in the order of :meth:`forest_pairs`) and its labels in the report."""
        a = self.paths.staged(self.paths.analysis)
        return [
            (f"{a}/forest/{d}/{x}+{y}.png", {"in-domain set": d, "pair": f"{x} × {y}"})
            for d, pairs in self.forest_pairs().items()
            for x, y in pairs
        ]

    def targets(self) -> list[str]:
        """What rule ``all`` asks for: the scores, the tables and every figure (the published set)."""
        a = self.paths.analysis
        return [
            self.paths.scores,
            self.paths.scores_csv,
            self.paths.provenance,
            self.paths.accuracy_html,
            self.paths.accuracy_csv,
            f"{a}/partial_correlations.csv",
            f"{a}/agreement.csv",
            f"{a}/explorer.html",
            f"{a}/answer.txt",
            f"{a}/heatmap_grid.png",
            *(f"{a}/consensus/{d}.png" for d in self.consensus_sets()),
            *(f"{a}/forest/{d}/{x}+{y}.png" for d, pairs in self.forest_pairs().items() for x, y in pairs),
            *(f"{a}/{kind}/{m}.png" for kind in ("heatmaps", "learning_curves", "scatter") for m in self.models),
            *(f"{a}/training_loss/{m}.png" for m, spec in self.models.items() if not spec.model_entry.is_series),
        ]

    def manifests(self, wildcards) -> list[str]:
        """The manifests of every run of the model ``wildcards.model`` (their loss histories)."""
        return [
            self.paths.manifest.format(**r.wildcards) for r in self.runs if r.model == wildcards.model and not r.series
        ]

    def staged_targets(self) -> list[str]:
        """The staging copies of :meth:`targets`, in the same order (what ``publish_results`` reads)."""
        return [self.paths.staged(t) for t in self.targets()]

    def published_rels(self) -> list[str]:
        """:meth:`targets` relative to the experiment folder (``scores.csv``, ``analysis/...``)."""
        return [t[len(self.paths.root) + 1 :] for t in self.targets()]

    def record_places(self) -> dict:
        """Where each evaluation record must say it sits (:func:`oodcorr.jobs.aggregate.check_place`)."""
        series = {
            m: {str(x): ck.get("path") or f"{ck['hub']}@{ck['revision']}" for x, ck in spec.checkpoints.items()}
            for m, spec in self.models.items()
            if spec.model_entry.is_series
        }
        return {
            "predictions": self.paths.predictions,
            "summary": self.paths.eval_summary,
            "checkpoint": f"{self.paths.run_dir}/checkpoints/checkpoint-{{step}}",
            "series": series,
        }

    def _cached(self, key: tuple, make: Callable[[], Any]) -> Any:
        if key not in self._cache:
            self._cache[key] = make()
        return self._cache[key]

    @rule_callable
    def dataset_params(self, wildcards) -> dict:
        """A dataset entry minus bookkeeping; any entry of the registries can be prepared."""
        return self._cached(("dataset", wildcards.dataset), lambda: self.exp.dataset_params(wildcards.dataset))

    @rule_callable
    def dataset_input(self, wildcards) -> list[str]:
        """A local dataset's file, so that editing the file reruns its preparation."""
        return self.exp.dataset_input(wildcards.dataset)

    def built_model_dir(self, model: str) -> str | None:
        """The folder the workflow builds a model in (a tiny model, a converted GGUF file), else None."""
        entry = self.models[model].model_entry
        pattern = self.paths.tiny_model if entry.is_tiny else self.paths.converted_model if entry.is_gguf else None
        return pattern.format(model=model) if pattern else None

    @rule_callable
    def model_input(self, wildcards) -> list[str]:
        d = self.built_model_dir(wildcards.model)
        return [d] if d else []

    @rule_callable
    def gguf_input(self, wildcards) -> list[str]:
        from ..core.model_dirs import gguf_file  # resolved only for the rule that reads it

        return [str(gguf_file(self.models[wildcards.model].model_entry))]

    @rule_callable
    def gguf_params(self, wildcards) -> dict:
        return self.models[wildcards.model].model_entry.params()

    @rule_callable
    def tokenize_params(self, wildcards) -> dict:
        def make():
            spec = self.models[wildcards.model]
            return {
                "model_spec": spec.model_entry.params(),
                "built_model_dir": self.built_model_dir(spec.name),
                "prompt": spec.prompt,
                "labels": list(self.labels),
                "coarse": dict(self.label_mode.get("coarse") or {}),
                "max_length": self.exp.config["evaluation"]["max_length"],
            }

        return self._cached(("tokenize", wildcards.model), make)

    @rule_callable
    def finetune_params(self, wildcards) -> dict:
        def make():
            run = self.run(wildcards)
            spec = self.models[run.model]
            return {
                "model_spec": spec.model_entry.params(),
                "built_model_dir": self.built_model_dir(spec.name),
                "finetune": spec.finetune,
                "prompt": spec.prompt,
                "labels": list(self.labels),
                "steps": list(run.steps),
                "max_steps": run.max_steps,
            }

        return self._cached(("finetune", wildcards.model, wildcards.indomain, wildcards.ntrain, wildcards.seed), make)

    @rule_callable
    def finetune_train_input(self, wildcards) -> str:
        return self.paths.data.format(dataset=self.train_set[wildcards.indomain])

    @rule_callable
    def checkpoints_input(self, wildcards) -> list[str]:
        """The run's finetune manifest, or for a series run the manifest of each checkpoint scored."""
        run = self.run(wildcards)
        if not run.series:
            return [self.paths.manifest.format(**run.wildcards)]
        steps = [int(wildcards.step)] if "step" in wildcards.keys() else run.steps
        return [self.paths.series_manifest.format(model=run.model, step=s) for s in steps]

    def _series_checkpoint(self, wildcards) -> dict:
        spec = self.models[wildcards.model]
        try:
            return spec.checkpoints[int(wildcards.step)]
        except (KeyError, TypeError):
            raise ConfigError(
                f"models[{wildcards.model}]: no series checkpoint at {spec.x_unit} {wildcards.step}"
            ) from None

    @rule_callable
    def series_params(self, wildcards) -> dict:
        spec = self.models[wildcards.model]
        return {
            "model": spec.name,
            "x_unit": spec.x_unit,
            "checkpoint": self._series_checkpoint(wildcards),
            "entry": {k: getattr(spec.model_entry, k) for k in ("trust_remote_code", "allow_pickle_weights")},
        }

    def series_files(self, wildcards) -> list[str]:
        """A local series checkpoint's files (a changed file rewrites its manifest); none for a hub one."""
        ck = self._series_checkpoint(wildcards)
        if not ck.get("path"):
            return []
        pickle = self.models[wildcards.model].model_entry.allow_pickle_weights
        return [str(f) for f in model_files(ck["path"], pickle)]

    def x_label(self, wildcards) -> str:
        """The learning curves' x-axis of a model: training step, step, or tokens."""
        spec = self.models[wildcards.model]
        return spec.x_unit if spec.model_entry.is_series else "training step"

    @rule_callable
    def eval_params(self, wildcards) -> dict:
        """An evaluation job's params, shared by the checkpoints of a run x testset (unit ``checkpoint``)."""

        def make():
            run = self.run(wildcards)
            spec = self.models[run.model]
            role = dict(self.testsets[run.in_domain]).get(wildcards.testset)
            if role is None:
                raise ConfigError(f"testset {wildcards.testset!r} is not evaluated for in-domain set {run.in_domain!r}")
            job = {
                "model_spec": spec.model_entry.params(),
                "built_model_dir": self.built_model_dir(spec.name),
                "provenance": {
                    "model": run.model,
                    "model_source": spec.model_entry.source_record,
                    "method": spec.model_entry.method,
                    "label_mode": self.label_mode["name"],
                    "in_domain": run.in_domain,
                    "n_train": run.n_train,
                    "seed": run.seed,
                    "run_id": run.id,
                    "role": role,
                    "finetune_lora": spec.lora,
                },
            }
            if run.series:  # not for finetuned runs: their params, and so their evaluations, stay as they were
                job["provenance"]["x_unit"] = spec.x_unit
            dtype = self.exp.config["evaluation"].get("dtype", "model")
            if dtype != "model":  # left out at its default, so upgrading reruns nothing
                job["dtype"] = dtype
            if self.unit == "run":
                job["steps"] = list(run.steps)
                job["predictions"] = [self.predictions_path(run, s, wildcards.testset) for s in run.steps]
            return job

        return self._cached(
            ("eval", wildcards.model, wildcards.indomain, wildcards.ntrain, wildcards.seed, wildcards.testset), make
        )

    def threads(self, rule: str):
        return rule_threads(self.models, rule)

    def rule_resources(self, rule: str) -> dict[str, Any]:
        """Snakemake ``resources`` of a per-model rule (evaluate's runtime times the checkpoints in unit ``run``)."""
        steps = (lambda wildcards: len(self.run(wildcards).steps)) if self.unit == "run" else None
        return rule_resources(self.models, rule, steps)


def load(config: dict, basedir: str | Path = ".", sources: Iterable[str | Path] = ()) -> Plan:
    """The one way from a config to its plan (the Snakefile and every CLI command call it). ``config`` is
    completed in place, as Snakemake's own is: named after its last source file unless it says ``experiment:``,
    its defaults filled in once the schema passes. Raises ConfigError naming the key."""
    sources = [Path(s) for s in sources]
    try:  # its values (YAML aliases counted each time used) and depth within core.limits' budgets
        limits.check_tree(config)
    except limits.TooLarge as e:
        where = schema.key_line(sources, e.parts) or (sources[-1] if sources else None)
        raise ConfigError(f"{where}: {e}" if where else str(e)) from None
    if sources:
        config.setdefault("experiment", sources[-1].stem)
    schema_path = Path(basedir) / "config" / "schema.yaml"
    schema.check_config(config, schema_path, sources=sources)
    schema.fill_defaults(config, schema_path)
    return build_plan(config, basedir)


def build_plan(config: dict, basedir=".") -> Plan:
    """The plan of a schema-validated config (defaults filled in), after :mod:`.checks`; raises ConfigError."""
    exp = Experiment(config, basedir)
    warnings = checks.check_config(exp)
    name = str(config.get("experiment") or "default")
    models = {}
    for config_entry in config["models"]:
        m = config_entry["name"]
        model_entry = exp.model_entry(m)
        series = model_entry.is_series
        models[m] = ModelSpec(
            name=m,
            model_entry=model_entry,
            finetune={} if series else exp.finetune_params(m),
            prompt=exp.prompt_for(m),
            distributed=canonical(config_entry["distributed"]) if config_entry.get("distributed") else None,
            resources=model_resources(config, config_entry),
            checkpoints=exp.series_checkpoints(m) if series else None,
            x_unit="tokens" if series and "tokens" in config_entry["series"]["checkpoints"][0] else "step",
            params_b=config_entry.get("params_b"),
        )
    checks.check_placement(models)
    runs = []
    for m, spec in models.items():
        if spec.model_entry.is_series:  # one run per in-domain set, nothing trained
            xs = tuple(spec.checkpoints)
            chosen = exp.models[m]["series"].get("in_domain")
            runs += [Run(m, d, 0, 0, xs, xs[-1], series=True) for d in exp.in_domain if not chosen or d in chosen]
            continue
        ft = exp.finetune_cfg(m)
        if not ft.get("max_steps") and not ft.get("epochs"):
            raise ConfigError(f"finetune (model {m}): give max_steps or epochs")
        per_step = ft["batch_size"] * ft.get("gradient_accumulation_steps", 1)
        for d in exp.in_domain:
            for n in ft["n_train"]:
                # optimizer steps of a run: max_steps, or epochs over its n examples
                total = int(ft.get("max_steps") or math.ceil(int(n) / per_step) * ft["epochs"])
                steps = _checkpoint_steps(ft, total, f"finetune.checkpoints (model {m}, n_train {n})")
                runs += [Run(m, d, int(n), int(s), steps, total) for s in ft["seeds"]]
    analysis = config["analysis"]
    warnings += checks.check_schedules(runs, analysis)
    testsets = {d: tuple(exp.testsets_for(d)) for d in exp.in_domain}
    checks.check_analysis_size(runs, testsets, analysis)
    return Plan(
        experiment=name,
        unit=config["evaluation"]["unit"],
        paths=Paths(f"results/{name}"),
        labels=tuple(exp.labels),
        label_mode=exp.label_mode,
        models=models,
        runs=tuple(runs),
        testsets=testsets,
        train_set={d: spec["train"] for d, spec in exp.in_domain.items() if spec.get("train")},
        datasets=tuple(exp.all_datasets()),
        pretraining={
            "corpus": dict(config.get("pretraining_corpus") or {}),
            "template": config["prompt"]["template"],
            "answers": [v.strip() for v in config["prompt"]["verbalisers"].values()],
        },
        analysis=analysis_options(analysis),
        score=analysis["score"],
        warnings=tuple(warnings),
        exp=exp,
    )
