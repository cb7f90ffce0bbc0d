"""Checks of what is on disk while planning, before any job runs, and the report when the run ends (the
checks of the config alone are in :mod:`oodcorr.planning.checks`)."""

from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

from ..core.answer import answer_lines, read_agreement
from ..core.errors import ConfigError, DataError, StaleResult
from ..core.io import json_or_none
from ..core.model_dirs import check_local_weights, package_dir, tokenizer_max_id, vocab_problem
from ..core.model_entry import ModelEntry
from ..core.records import local_source_changed
from ..core.refusals import read_refusals, refusals_dir
from ..core.token_cache import cache_info_path, cache_problem, tokenize_settings_digest
from ..modeling.gguf_conversion import checked_header
from ..modeling.loading import load_tokenizer, tokenizer_files_fingerprint
from ..planning.checks import TRUNCATION_WARNING
from ..planning.config import Experiment
from ..planning.plan import Plan
from . import experiment
from .free_space import free_space_problems


def check_on_disk(plan: Plan) -> list[str]:
    """What the config points at and what earlier runs left, checked before any job runs; returns warnings."""
    check_inputs_exist(plan.exp)
    _check_tokenizers_on_disk(plan)
    check_sources_unchanged(plan)
    _check_summaries_complete(plan)
    return truncation_warnings(plan)


def end_of_run_warnings(plan: Plan) -> list[str]:
    """The planning warnings, the datasets' own, prompts cut and another config's, gathered once."""
    out = list(plan.warnings)
    # the warnings preparation recorded in this experiment's dataset meta files, or that one is unreadable
    for name in plan.exp.all_datasets():
        meta = Path(plan.paths.data_meta.format(dataset=name))
        if not meta.exists():
            continue
        try:
            doc = json.loads(meta.read_text(encoding="utf-8"))
            warning = doc.get("warning") if isinstance(doc, dict) else None
        except (OSError, ValueError) as e:
            out.append(
                f"{meta}: the description of prepared dataset {name!r} is unreadable ({type(e).__name__}: "
                f"{str(e)[:120]}); delete it and run again: the dataset is prepared again"
            )
            continue
        if warning:
            out.append(f"{warning} (see {meta})")
    out += truncation_warnings(plan) + experiment.warnings_given(plan)
    return list(dict.fromkeys(out))


def end_of_run_report(plan: Plan, failed: bool, asked: list[str] | None = None, local: bool = False) -> list[str]:
    """The lines ``onsuccess`` / ``onerror`` print; never raises. ``asked``: the targets of a run that did
    not ask for the published set. ``local``: the jobs ran here (a job killed before it could say why is named)."""
    lines, cut = [], []
    try:
        cut = truncation_warnings(plan)  # said last: prompts cut change what every score means
        lines += [f"oodcorr: WARNING: {w}" for w in end_of_run_warnings(plan) if w not in cut]
    except Exception as e:  # noqa: BLE001 -- the handler must finish; the reason is printed
        lines.append(f"oodcorr: WARNING: the end-of-run warnings could not be gathered ({type(e).__name__}: {e})")
    P = plan.paths
    try:
        if not failed and asked:
            lines.append(f"oodcorr: made what was asked: {', '.join(asked)}; no scores or answer were made by this run")
            if os.path.exists(P.published):
                lines.append(
                    f"oodcorr: the results published by an earlier run are as they were: {P.scores_csv}, {P.analysis}/"
                )
        elif not failed:
            lines.append(
                f"oodcorr: scores in {P.scores_csv}, partial correlations in {P.analysis}/partial_correlations.csv, "
                f"heatmaps in {P.analysis}/heatmaps/"
            )
            lines += [f"oodcorr: {line}" for line in _answer_of(plan)]
            page = Path(P.analysis) / "explorer.html"
            if page.exists():
                lines.append(f"oodcorr: every pair, explored in a browser (one file, offline): {page}")
        elif any(os.path.exists(t) for t in plan.targets()):
            # the published set is replaced only as a whole, once every step after the evaluations succeeded
            lines.append(
                f"oodcorr: the run failed (see above); {P.scores_csv} and {P.analysis}/ still hold the "
                "previous results, as a whole, until a run succeeds"
            )
    except Exception as e:  # noqa: BLE001 -- as above
        lines.append(f"oodcorr: the run {'failed' if failed else 'finished'}; results are under {P.root}/ ({e})")
    lines += [f"oodcorr: WARNING: {w}" for w in cut]
    if failed:
        try:
            lines += [f"oodcorr: {line}" for line in free_space_problems(plan, [])]
            lines += refusal_lines(plan, killed=local)
        except Exception as e:  # noqa: BLE001 -- as above
            lines.append(f"oodcorr: the jobs' refusals could not be gathered ({type(e).__name__}: {e})")
    return lines


REFUSALS_SHOWN = 5  # the sentences repeated at most (the jobs that stopped for want of room first)


def refusal_lines(plan: Plan, killed: bool = False) -> list[str]:
    """Each sentence this run's jobs stopped with, the job and its log named, a full disk's first."""
    found = [d for d in read_refusals(refusals_dir(plan.paths.logs)) if killed or d.get("kind") != "killed"]
    # stable: the order they stopped in, within each
    found.sort(key=lambda d: d.get("kind") not in ("disk full", "write failed"))
    out = []
    for doc in found[:REFUSALS_SHOWN]:
        wildcards = doc.get("wildcards") or {}
        job = f"job {doc.get('rule')}" + (
            f" ({', '.join(f'{k}={v}' for k, v in wildcards.items())})" if wildcards else ""
        )
        log = doc.get("log") or "the job's log"
        if doc.get("kind") == "failed":  # an exception no script caught: its traceback is in the log
            out.append(f"oodcorr: {job} failed: {doc.get('message')} (the traceback is in {log})")
        elif doc.get("kind") == "killed":
            out.append(f"oodcorr: {job} was {_killed_sentence(plan, doc)} (its log: {log})")
        else:
            out.append(f"oodcorr: {job} stopped: {doc.get('message')} (its log: {log})")
    if len(found) > REFUSALS_SHOWN:
        rules = Counter(doc.get("rule") for doc in found[REFUSALS_SHOWN:])
        counts = ", ".join(f"{n} {rule}" for rule, n in sorted(rules.items(), key=lambda t: str(t[0])))
        out.append(
            f"oodcorr: and {len(found) - REFUSALS_SHOWN} more jobs stopped ({counts}); each log's last line says why"
        )
    return out


_BATCH = {"evaluate": "evaluation.batch_size", "finetune": "finetune.batch_size"}  # what a job's memory grows with


def _killed_sentence(plan: Plan, doc: dict) -> str:
    """A job killed on this machine before it could say why: what does that, and its memory's config key."""
    rule, model = str(doc.get("rule")), (doc.get("wildcards") or {}).get("model")
    spec = plan.models.get(model) if model else None
    res = spec.resources.get(rule) if spec else None
    memory = (
        f"Its rule's memory, `{res.where('mem_mb').replace('<rule>', rule)}: {res.mem_mb}` in the config, limits "
        "no job run on this machine: it is what Snakemake counts against `--resources mem_mb=N`. Run again with N "
        "this machine's free memory (MB), and raise that key to what one such job needs, so that fewer run at once"
        + (f"; or lower `{_BATCH[rule]}`" if rule in _BATCH else "")
        if res
        else "Run fewer jobs at once (`--cores`)"
    )
    return (
        f"{doc.get('message')}. On this machine that is most often the kernel's out-of-memory killer (`dmesg | "
        f"grep -i oom`). {memory}. Jobs run on this machine have no time limit"
    )


def _answer_of(plan: Plan) -> list[str]:
    """The answer's lines from the published ``agreement.csv``: none when there is none, one when unreadable."""
    path = Path(plan.paths.analysis) / "agreement.csv"
    if not path.exists():
        return []
    try:
        rows = read_agreement(path)
    except (OSError, ValueError) as e:
        return [f"{path}: the answer's table cannot be read ({type(e).__name__}: {str(e)[:120]})"]
    method, res = plan.analysis["methods"][0], plan.analysis["residualisers"][0]
    return answer_lines(rows, method, res, plan.paths.analysis, consensus_sets=plan.consensus_sets())


def check_inputs_exist(exp: Experiment) -> None:
    for name in exp.all_datasets():
        # a local dataset's file must exist: Snakemake would quietly leave the testset out once scores exist
        spec = exp.dataset(name)
        if spec.get("source") != "local":
            continue
        where = f"datasets.{name}.path" + (f" (from {spec['_registry']})" if spec.get("_registry") else "")
        if not spec.get("path"):
            raise ConfigError(f"{where}: a local dataset needs a `path`")
        path = exp.resolve_path(spec["path"])
        if not path.is_file():
            rel = "" if Path(spec["path"]).is_absolute() else f" (a relative path starts at {exp.basedir})"
            raise ConfigError(f"{where}: file not found: {path}{rel}")
    for name, m in exp.models.items():
        model_entry = exp.model_entry(name)
        if model_entry.path or model_entry.package:
            _check_local_model(model_entry)
        for ck in (m.get("series") or {}).get("checkpoints", []):
            if ck.get("path"):
                _check_local_model(replace(model_entry, path=ck["path"]), f"{model_entry.where}.series.checkpoints")


def _check_local_model(model_entry: ModelEntry, key: str | None = None) -> None:
    """A local or packaged model must exist and load under the safety defaults, a GGUF file's header be safe
    to read. ``key``: where a series checkpoint's ``path`` (set on ``model_entry``) is given."""
    if model_entry.is_gguf and not key:
        checked_header(model_entry)
        return
    p = package_dir(model_entry) if model_entry.package else Path(model_entry.path)  # package_dir: a folder
    if not p.exists():
        where = key or f"{model_entry.where}.path"
        raise ConfigError(f"{where}: {p} does not exist (a relative path starts at the working directory {Path.cwd()})")
    check_local_weights(str(p), model_entry)


def _tokenizer_dir(plan: Plan, model: str) -> Path | None:
    """Where a model's tokenizer is while planning; None for hub models and a GGUF file not yet converted."""
    entry, built = plan.models[model].model_entry, plan.built_model_dir(model)  # built: a tiny or converted model's
    if built:
        return Path(built) if entry.is_tiny or (Path(built) / "tokenizer.json").exists() else None
    if entry.source == "path":
        return Path(entry.path)
    return package_dir(entry) if entry.source == "package" else None


def _quick_verbaliser_problem(tokenizer_json: Path, verbalisers: dict, labels: list[str]) -> bool:
    """Whether the `tokenizers` library alone (milliseconds) splits a verbaliser or maps two to one token: a
    hint only (transformers may set the tokenizer up differently), confirmed with the jobs' own code."""
    from tokenizers import Tokenizer  # tokenizers: only when a tokenizer is already on disk

    try:
        tok = Tokenizer.from_file(str(tokenizer_json))
        ids = [tok.encode(verbalisers[lab], add_special_tokens=False).ids for lab in labels]
    except Exception:  # noqa: BLE001 -- unreadable here: let the exact check decide
        return True
    return any(len(x) != 1 for x in ids) or len({x[0] for x in ids}) != len(ids)


def _check_tokenizers_on_disk(plan: Plan) -> None:
    """Every tokenizer already on disk gives ids its model's embeddings hold, and one distinct token per
    verbaliser (models with their own code are left to their jobs: planning runs no model's code)."""
    for name, spec in plan.models.items():
        d = _tokenizer_dir(plan, name)
        if d is None or not (d / "tokenizer.json").is_file():
            continue
        try:
            max_id = tokenizer_max_id(d / "tokenizer.json")
        except (OSError, ValueError, RecursionError):
            max_id = None  # unreadable here: the jobs' tokenizer loading names it
        problem = vocab_problem(name, d, max_id)
        if problem:
            raise ConfigError(problem)
        if spec.model_entry.method != "pattern" or not spec.prompt or spec.model_entry.trust_remote_code:
            continue
        if not _quick_verbaliser_problem(d / "tokenizer.json", spec.prompt["verbalisers"], list(plan.labels)):
            continue
        from ..modeling.prompting import verbaliser_ids  # prompting imports torch: kept out of planning

        # the jobs' own code (transformers, seconds): raises the jobs' ConfigError naming the label and model
        verbaliser_ids(
            load_tokenizer(spec.model_entry, plan.built_model_dir(name)),
            spec.prompt["verbalisers"],
            list(plan.labels),
            name,
        )


def check_sources_unchanged(plan: Plan) -> None:
    """A local dataset file whose bytes changed since it was prepared but whose mtime is not newer than the
    prepared copy is refused: Snakemake reruns a job only when an input is newer."""
    for name in plan.datasets:
        meta_path = Path(plan.paths.data_meta.format(dataset=name))
        data_path = Path(plan.paths.data.format(dataset=name))
        if plan.exp.dataset(name).get("source") != "local" or not (meta_path.is_file() and data_path.is_file()):
            continue
        meta = json_or_none(meta_path)
        if meta is None:
            continue  # a damaged meta file: its preparation is redone when an input changes; nothing to compare
        source = plan.exp.dataset_input(name)
        if not source or str(meta.get("path")) != source[0] or not os.path.isfile(source[0]):
            continue  # the entry points at another file: the changed input reruns the preparation
        if os.stat(source[0]).st_mtime > min(meta_path.stat().st_mtime, data_path.stat().st_mtime):
            continue  # newer than the prepared copy: Snakemake prepares it again
        changed = local_source_changed(meta)
        if changed:
            raise DataError(
                f"{changed}, but its modification time is older than the prepared copy {data_path}, so Snakemake "
                f"would keep the old file's results. Run `touch {source[0]}` and run again"
            )


def _check_summaries_complete(plan: Plan) -> None:
    """With ``evaluation.unit: run``: a job summary whose predictions files are gone is a StaleResult
    (Snakemake would not rerun it, its output being there)."""
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
        inputs = [
            plan.paths.manifest.format(**job.run.wildcards),
            plan.paths.tokenized.format(model=job.run.model, testset=job.testset),
        ]
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
        lines = [
            f"{s}: lists {len(g)} predictions file(s) that are gone ({', '.join(g[:2])}{', ...' if len(g) > 2 else ''})"
            for s, g in sorted(stale.items())
        ]
        shown = lines[:5] + ([f"... and {len(lines) - 5} more summaries"] if len(lines) > 5 else [])
        raise StaleResult(
            "evaluation summaries list predictions files that are gone, and Snakemake would not run their jobs "
            "again (with evaluation.unit run a job declares only its summary):\n  "
            + "\n  ".join(shown)
            + f"\nDelete those summaries and run again (`rm {' '.join(sorted(stale))}`): only what is gone is scored"
        )


def check_tokenized_caches(plan: Plan, rebuild: bool) -> list[str]:
    """Tokenised testsets that cannot be used, said; deleted with ``rebuild`` (under the experiment's lock)."""
    out = []
    for model in plan.models:
        folder = _tokenizer_dir(plan, model)
        fp = tokenizer_files_fingerprint(folder) if folder is not None and folder.is_dir() else None
        for testset in sorted({t for ts in plan.testsets.values() for t, _ in ts}):
            path = Path(plan.paths.tokenized.format(model=model, testset=testset))
            why = cache_problem(path, fp, testset=testset, model=model) if path.exists() else None
            if why is None:
                continue
            if rebuild:
                path.unlink(missing_ok=True)
                cache_info_path(path).unlink(missing_ok=True)
                out.append(f"{why}. Deleted: this run tokenises the testset again before it is evaluated")
            else:
                out.append(f"{why}. A run (not a dry run) deletes it and tokenises the testset again")
    return out


def truncation_warnings(plan: Plan) -> list[str]:
    """Testsets and training samples with more than ``TRUNCATION_WARNING`` of their prompts cut, from the
    caches' sidecars made with this config's settings and the finished runs' manifests."""
    out = []
    testsets = sorted({t for ts in plan.testsets.values() for t, _ in ts})
    # the prepared data's description (None: not prepared, or unreadable): a sidecar of other data is not this one's
    metas = {t: json_or_none(plan.paths.data_meta.format(dataset=t)) for t in testsets}
    for model in plan.models:
        settings = tokenize_settings_digest(plan.tokenize_params(SimpleNamespace(model=model)))
        for testset in testsets:
            cache = plan.paths.tokenized.format(model=model, testset=testset)
            try:
                info = json.loads(cache_info_path(cache).read_text(encoding="utf-8"))
                n, cut = int(info["n"]), int(info["n_truncated"])
            except (OSError, ValueError, KeyError, TypeError):
                continue
            meta = metas[testset]
            other = isinstance(meta, dict) and meta.get("fingerprint") != info.get("fingerprint")
            if info.get("settings") != settings or not os.path.isfile(cache) or other:
                continue
            if n and cut / n > TRUNCATION_WARNING:
                out.append(
                    f"testset {testset!r}, model {model!r}: {_share(cut, n, 'prompts')} longer "
                    f"than evaluation.max_length ({info.get('max_length')} tokens) and were cut, keeping "
                    "their end; raise evaluation.max_length to score whole examples"
                )
    for run in plan.runs:
        manifest = Path(plan.paths.manifest.format(**run.wildcards))
        try:
            info = json.loads(manifest.read_text(encoding="utf-8"))
            cut = int(info.get("n_truncated_prompts") or 0)
        except (OSError, ValueError, TypeError):
            continue
        if run.n_train and cut / run.n_train > TRUNCATION_WARNING:
            out.append(
                f"run {run.id}: {_share(cut, run.n_train, 'training prompts')} longer "
                f"than finetune.max_length ({plan.models[run.model].finetune.get('max_length')} tokens) and "
                "were cut; raise finetune.max_length"
            )
    return out


def _share(cut: int, n: int, what: str) -> str:
    return f"all {n} {what} (100%) are" if cut == n else f"{cut} of {n} {what} ({cut / n:.0%}) are"
