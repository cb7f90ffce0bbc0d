"""Reading a folder of lm-evaluation-harness results into the canonical long table.

lm-evaluation-harness (``lm_eval --model hf --model_args pretrained=M,revision=step1000 --tasks
... --output_path OUT [--log_samples]``) writes, per run of it, ``OUT/<model>/results_<date>.json``
and, with ``--log_samples``, one ``samples_<task>_<date>.jsonl`` per task beside it. A checkpoint
series is a loop of such runs over revisions. :func:`read_folder` reads every results file under a
folder (searched recursively) and returns one score per model x run x step x task:

* the **formats**: the current one, ``results[task]["acc,none"]`` (metric, then the filter after
  the comma) with ``"acc_stderr,none"``, ``n-samples[task]["effective"]`` and
  ``config.model_args``; and the older one, ``results[task]["acc"]`` (the Pythia suite's
  published files). ``model_args`` is a ``key=value,...`` string or a mapping.
* the **metric** by name (``acc``, ``acc_norm``, ``exact_match``, ...; ``name,filter`` where a
  task has it under several filters). A selected task without it is an error naming the file and
  the metrics that task has.
* **model, run and step**: from ``model_args`` (``pretrained``; ``revision`` such as ``step1000``,
  ``global_step1000`` or ``1000``, else a ``pretrained`` path ending in ``checkpoint-1000`` /
  ``step1000``), or from a **path pattern** (:func:`.lmeval_identity.compile_pattern`) whose ``{model}``, ``{run}``
  and ``{step}`` are read from each file's path below the folder. What the pattern names wins
  for model and run (labels); a step named by both must agree. Runs (seeds) come only from the
  pattern's ``{run}``: without it each model is one run.
* **per-example logs**: ``samples_<task>_<date>.jsonl`` beside ``results_<date>.json`` gives each
  document's 0/1 value of the metric (same filter), for the example-level bootstrap and each
  task's item noise; its mean must equal the results file's score (else it is from another run,
  and refused).
* **groups**: ``group_subtasks`` (group -> its subtasks, a subtask possibly a group itself; the
  current format) says which tasks are made of others (``mmlu`` of ``mmlu_stem`` of
  ``mmlu_anatomy`` ...); the union over the files is :attr:`LmEvalResults.groups`, which the
  analysis reads to leave out pairs that share items (:mod:`.shared_items`).

Bounds, checked before anything is parsed (the limits are flags of ``oodcorr analyse``):
at most :data:`MAX_FILES` ``.json``/``.jsonl`` files (counted first, the count said), a results
file of at most :data:`MAX_RESULTS_BYTES` (a real one is kilobytes to a few megabytes; more is
usually samples written into it), a samples line of at most
:data:`.lmeval_samples.MAX_SAMPLE_LINE_BYTES` (samples files are streamed, line by line, keeping
two numbers a document: :func:`.lmeval_samples.read_samples`). Folders are walked
following links within the folder, each real folder once: a link back into a folder already read
(a loop) is said and not followed again, a link that leads out of the folder is said and not
followed (``--follow-links`` follows it), and a folder that cannot be listed or searched is
named. Every refusal is a :class:`~oodcorr.core.errors.DataError` naming
the file; reading is done before anything is written, so a refusal leaves no result.
"""

from __future__ import annotations

import hashlib
import logging
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ..core.errors import DataError, did_you_mean
from .lmeval_files import MAX_FILES, MAX_RESULTS_BYTES, list_files, load_json
from .lmeval_identity import compile_pattern, identity, parse_model_args
from .lmeval_samples import read_samples
from .score_ranges import LMEVAL_SHARES_ONLY, is_item_share, metric_range, out_of_range

log = logging.getLogger(__name__)

RESULTS_NAME = re.compile(r"^results_(?P<date>.+)\.json$")


@dataclass
class LmEvalResults:
    """What :func:`read_folder` read: ``scores`` (model, run, step, testset, score, stderr, n, file),
    ``examples`` (model, run, unit, testset, example, correct; None without samples files), the files
    read and their digest, and ``groups``: every group the files name with its subtasks (their union
    over the files)."""

    folder: Path
    metric: str
    scores: pd.DataFrame
    examples: pd.DataFrame | None
    files: list[Path] = field(default_factory=list)
    samples_files: list[Path] = field(default_factory=list)
    digest: str = ""
    groups: dict[str, list[str]] = field(default_factory=dict)

    def long(self, in_domain: str) -> pd.DataFrame:
        """The canonical long table (:data:`oodcorr.analysis.CANON`) with ``in_domain`` as every
        run's in-domain testset; an error naming the tasks read when it is not one of them."""
        tasks = sorted(self.scores["testset"].unique())
        if in_domain not in tasks:
            raise DataError(
                f"{self.folder}: the in-domain testset {in_domain!r} is not a task of the results read "
                f"(metric {self.metric!r}){did_you_mean(in_domain, tasks)}; tasks are "
                f"{tasks[:40]}{' ...' if len(tasks) > 40 else ''}"
            )
        s = self.scores
        out = pd.DataFrame(
            {
                "model": s["model"].astype(str),
                "in_domain": in_domain,
                "run": s["run"].astype(str),
                "unit": s["step"].astype(int),
                "testset": s["testset"].astype(str),
                "score": s["score"].astype(float),
            }
        )
        if is_item_share(self.metric):  # the items behind each score bound its item noise
            out["n"] = items_behind(s["n"], s["score"], s["stderr"]).to_numpy()
        return out.reset_index(drop=True)


def items_behind(n: pd.Series, score: pd.Series, stderr: pd.Series) -> pd.Series:
    """The items behind each score: the harness's sample count (``n-samples``' ``effective``) where it
    wrote one, else read back from its standard error of a share, ``sqrt(p (1 - p) / (n - 1))``
    (rounded); NaN where neither says."""
    n = pd.to_numeric(n, errors="coerce").astype(float)
    p, se = score.astype(float), pd.to_numeric(stderr, errors="coerce").astype(float)
    with np.errstate(invalid="ignore", divide="ignore"):
        back = np.round(p * (1 - p) / (se * se) + 1)
    back = back.where((se > 0) & np.isfinite(back) & (back >= 1))
    return n.where(n >= 1, back)


def _metric_key(task: str, values: dict, metric: str, path: Path) -> str | None:
    """The key of ``metric`` among a task's values (``acc,none`` or ``acc``), None when absent;
    several filters of it without one named is an error listing them."""
    if metric in values:
        return metric
    if "," in metric:
        return None
    keys = [k for k in values if isinstance(k, str) and k.split(",", 1)[0] == metric]
    if len(keys) > 1:
        raise DataError(
            f"{path}: task {task!r} has metric {metric!r} under several filters ({', '.join(keys)}); name one, "
            f"e.g. --metric {keys[0]}"
        )
    return keys[0] if keys else None


def metric_names(values: dict) -> list[str]:
    """The metrics a task's values hold (stderr entries and labels left out)."""
    return sorted(
        k
        for k, v in values.items()
        if isinstance(k, str)
        and "_stderr" not in k
        and k not in ("alias", "name", "sample_len", "sample_count")
        and isinstance(v, (int, float))
        and not isinstance(v, bool)
    )


def _number(v, path: Path, task: str, key: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise DataError(
            f"{path}: task {task!r}, metric {key!r} is {str(v)[:40]!r}, not a number; rerun that evaluation, "
            "leave the task out (--tasks) or move the file out of the folder"
        )
    if not math.isfinite(v):
        raise DataError(
            f"{path}: task {task!r}, metric {key!r} is {v}, not a finite score; rerun that evaluation, leave the "
            "task out (--tasks) or move the file out of the folder"
        )
    name = key.split(",", 1)[0]
    rng = metric_range(name)
    if rng is not None and (name in LMEVAL_SHARES_ONLY or rng[0] < 0 or rng[1] == math.inf):
        if not rng[0] <= v <= rng[1]:
            raise DataError(
                f"{path}: task {task!r}, metric {key!r} is {v:g}, outside [{rng[0]:g}, {rng[1]:g}], the range of "
                f"{name!r}: not a score lm-evaluation-harness writes (a hand-edited or damaged file); rerun that "
                "evaluation, leave the task out (--tasks) or move the file out of the folder"
            )
    return float(v)


def _check_scales(rows: list[dict]) -> None:
    """The metrics that may be shares or percentages (the harness's squad-style ``f1`` is in percent,
    its ``f1`` of classification a share): every score of one metric key is on one scale, told by
    their median (:func:`oodcorr.analysis.score_ranges.score_range`); one outside it names its file."""
    by_key: dict[str, list[dict]] = {}
    for row in rows:
        by_key.setdefault(row["key"], []).append(row)
    for key, group in by_key.items():
        scores = pd.DataFrame({key: [r["score"] for r in group]})
        bad = out_of_range(scores, key)
        if bad is not None:
            r = group[bad[0]]
            raise DataError(
                f"{r['file']}: task {r['testset']!r}, metric {key!r} is {bad[2]:g}, {bad[3]}: not on the scale of "
                "the other files (a hand-edited or damaged file); rerun that evaluation, leave the task out "
                "(--tasks) or move the file out of the folder"
            )


def read_results_file(
    path: Path,
    rel: str,
    *,
    metric: str,
    tasks: list[str] | None,
    pattern: re.Pattern | None,
    max_bytes: int = MAX_RESULTS_BYTES,
    without: set | None = None,
    seen: set | None = None,
    groups: dict | None = None,
) -> list[dict]:
    """One row per task of one results file (the columns of :class:`LmEvalResults`' ``scores`` and
    ``key``, the metric's key); with no ``tasks`` named, the tasks without the metric are added to
    ``without``; every task the file holds, read or not, to ``seen``; the file's groups with their
    subtasks (``group_subtasks``) to ``groups`` (group -> set of subtasks)."""
    doc = load_json(path, max_bytes)
    if not isinstance(doc, dict) or not isinstance(doc.get("results"), dict):
        raise DataError(
            f"{path}: not an lm-evaluation-harness results file (no 'results' object); move it out of the folder"
            + (" or narrow --path-pattern" if pattern else ", or give --path-pattern to read only the results files")
        )
    if groups is not None:
        for g, kids in _group_subtasks(doc.get("group_subtasks"), path).items():
            groups.setdefault(g, set()).update(kids)
    config = doc.get("config") if isinstance(doc.get("config"), dict) else {}
    try:
        args = parse_model_args(config.get("model_args"))
    except ValueError as e:
        raise DataError(
            f"{path}: config.model_args: {e}; the harness loaded the last, so the file names another checkpoint "
            "than it seems to. Rerun that evaluation with each argument once, or move the file out of the folder"
        ) from None
    model, step, how = identity(args, config)
    run = "all"
    if pattern is not None:
        m = pattern.match(rel)
        fields = m.groupdict() if m else {}
        if "step" in fields:
            if step is not None and int(fields["step"]) != step:
                raise DataError(
                    f"{path}: its path gives step {int(fields['step'])} (--path-pattern) but its model_args give "
                    f"{step} ({how}); fix the file's name or the pattern"
                )
            step = int(fields["step"])
        model = fields.get("model") or model
        run = fields.get("run") or run
    if model is None or step is None:
        lack = " and ".join(w for w, v in (("the model", model), ("the step", step)) if v is None)
        raise DataError(
            f"{path}: {lack} cannot be told from config.model_args ({how}); give --path-pattern with "
            + " and ".join(p for p, v in (("{model}", model), ("{step}", step)) if v is None)
            + ", e.g. --path-pattern '{model}/step{step}/*.json'"
        )
    results = doc["results"]
    if seen is not None:
        seen.update(results)
    wanted = tasks if tasks is not None else sorted(results)
    n_samples = doc.get("n-samples") if isinstance(doc.get("n-samples"), dict) else {}
    rows = []
    for task in wanted:
        values = results.get(task)
        if values is None:
            continue  # said once for all files (read_folder)
        if not isinstance(values, dict):
            raise DataError(f"{path}: results[{task!r}] is not an object of metrics; move the file out of the folder")
        key = _metric_key(task, values, metric, path)
        if key is None:
            if tasks is None:
                if without is not None:
                    without.add(task)
                continue  # a task without this metric, when no tasks were named: said once (read_folder)
            raise DataError(
                f"{path}: task {task!r} has no metric {metric!r}; it has {metric_names(values) or 'none'}: "
                "choose one with --metric, or leave the task out of --tasks"
            )
        score = _number(values[key], path, task, key)
        name, _, filt = key.partition(",")
        se = values.get(f"{name}_stderr" + (f",{filt}" if filt else ""))
        n = n_samples.get(task, {}).get("effective") if isinstance(n_samples.get(task), dict) else None
        rows.append(
            {
                "model": str(model),
                "run": str(run),
                "step": int(step),
                "testset": task,
                "score": score,
                "stderr": float(se) if isinstance(se, (int, float)) and not isinstance(se, bool) else math.nan,
                "n": int(n) if isinstance(n, int) and not isinstance(n, bool) else pd.NA,
                "file": str(path),
                "key": key,
            }
        )
    return rows


# ---- samples ----
def _group_subtasks(v, path: Path) -> dict[str, list[str]]:
    """A results file's ``group_subtasks`` (group -> the names of its subtasks; absent in the older
    format): checked to be that, else refused naming the file."""
    if v is None:
        return {}
    ok = isinstance(v, dict) and all(
        isinstance(kids, list) and all(isinstance(k, str) for k in kids) for kids in v.values()
    )
    if not ok:
        raise DataError(
            f"{path}: group_subtasks is not an object of task-name lists (a hand-edited or damaged file); it says "
            "which tasks are groups of others (pairs of them share items). Rerun that evaluation or move the file out "
            "of the folder"
        )
    return {str(g): [k for k in kids if k != g] for g, kids in v.items() if kids}


def samples_path(results: Path, task: str) -> Path | None:
    """The ``--log_samples`` file of ``task`` written with ``results`` (same folder, same date)."""
    m = RESULTS_NAME.match(results.name)
    return results.with_name(f"samples_{task}_{m.group('date')}.jsonl") if m else None


# ---- the folder ----
def read_folder(
    folder: str | Path,
    *,
    metric: str = "acc",
    tasks: list[str] | None = None,
    path_pattern: str | None = None,
    samples: bool = True,
    max_files: int = MAX_FILES,
    max_bytes: int = MAX_RESULTS_BYTES,
    follow_links: bool = False,
    in_domain: str | None = None,
) -> LmEvalResults:
    """Every results file under ``folder`` -> :class:`LmEvalResults` (see the module's docstring).
    ``in_domain`` (``--in-domain``) is read whatever ``tasks`` names; a task in no file is an error
    naming the flag that asked for it, with the files' tasks closest to it.

    Two files giving one (model, run, step, task) is an error naming both."""
    folder = Path(folder)
    pattern = compile_pattern(path_pattern) if path_pattern else None
    files, notes = list_files(folder, max_files, follow_links)
    for n in notes:
        log.warning("%s", n)
    rels = {p: p.relative_to(folder).as_posix() for p in files}
    json_files = [p for p in files if p.name.endswith(".json")]
    if pattern is not None:
        chosen = [p for p in json_files if pattern.match(rels[p])]
        if not chosen:
            shown = ", ".join(rels[p] for p in json_files[:3])
            raise DataError(
                f"{folder}: no file matches --path-pattern {path_pattern!r} (of {len(json_files)} .json files"
                + (f", e.g. {shown}" if shown else "")
                + "); the pattern is matched against each path below the folder"
            )
        if len(chosen) < len(json_files):
            log.info(
                "%s: %d of %d .json files match --path-pattern %r; the others are not read",
                folder,
                len(chosen),
                len(json_files),
                path_pattern,
            )
    else:
        chosen = [p for p in json_files if not p.name.startswith("samples_")]
    if not chosen:
        raise DataError(f"{folder}: holds no .json results file of lm-evaluation-harness (searched recursively)")
    if tasks is not None and in_domain is not None and in_domain not in tasks:
        tasks = [*tasks, in_domain]
    rows, where, without, seen, groups = [], {}, set(), set(), {}
    for p in chosen:
        got = read_results_file(
            p,
            rels[p],
            metric=metric,
            tasks=tasks,
            pattern=pattern,
            max_bytes=max_bytes,
            without=without,
            seen=seen,
            groups=groups,
        )
        for row in got:
            k = (row["model"], row["run"], row["step"], row["testset"])
            if k in where:
                raise DataError(
                    f"{where[k]} and {p}: both give model {k[0]!r}"
                    + (f", run {k[1]!r}" if k[1] != "all" else "")
                    + f", step {k[2]}, task {k[3]!r}; keep one (an evaluation run twice?) and move the other out of "
                    "the folder, or tell them apart with {run} in --path-pattern"
                )
            where[k] = p
            rows.append(row)
    if not rows:
        raise DataError(
            f"{folder}: no task of the {len(chosen)} results file(s) has the metric {metric!r}"
            + (f" among --tasks {','.join(tasks)}" if tasks else "")
            + f"; e.g. {chosen[0]} has {_file_metrics(chosen[0], max_bytes)}: choose one with --metric"
        )
    _check_scales(rows)
    scores = pd.DataFrame(rows).sort_values(["model", "run", "step", "testset"], kind="stable")
    found = set(scores["testset"])
    if without - found:
        log.info(
            "%s: %d task(s) have no metric %r and are not read: %s%s",
            folder,
            len(without - found),
            metric,
            ", ".join(sorted(without - found)[:10]),
            " ..." if len(without - found) > 10 else "",
        )
    if in_domain is not None and in_domain not in seen:
        raise DataError(
            f"{folder}: --in-domain {in_domain!r} is a task of none of the {len(chosen)} results files"
            f"{did_you_mean(in_domain, seen)}; their tasks include {sorted(seen)[:20]}"
        )
    if tasks is not None:
        absent = [t for t in tasks if t not in seen]
        if absent:
            hints = "".join(did_you_mean(t, seen, n=1, lead=f"; {t}: ") for t in absent)
            raise DataError(
                f"{folder}: --tasks {', '.join(absent)}: in none of the {len(chosen)} results files{hints}; their "
                f"tasks include {sorted(seen)[:20]}"
            )
    _say_missing_tasks(folder, scores, found, in_domain)
    examples, sample_files = None, []
    if samples:
        frames = []
        for row in rows:
            sp = samples_path(Path(row["file"]), row["testset"])
            if sp is None or not sp.exists():
                continue
            sample_files.append(sp)
            ex = read_samples(sp, row["key"], row["score"])
            frames.append(
                ex.assign(model=row["model"], run=row["run"], unit=row["step"], testset=row["testset"])[
                    ["model", "run", "unit", "testset", "example", "correct"]
                ]
            )
        if frames:
            examples = pd.concat(frames, ignore_index=True)
            examples = examples.astype({c: "category" for c in ("model", "run", "testset")})  # a few names, repeated
            log.info(
                "%s: per-example samples for %d of %d checkpoint x task scores (%d samples files)",
                folder,
                len(frames),
                len(rows),
                len(frames),
            )
    h = hashlib.sha256()
    for p in sorted(set(chosen) | set(sample_files)):
        h.update(rels.get(p, str(p)).encode() + b"\0")
        with open(p, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
    log.info(
        "%s: %d results files, %d models, %d steps, %d tasks, metric %s",
        folder,
        len(chosen),
        scores["model"].nunique(),
        scores["step"].nunique(),
        len(found),
        metric,
    )
    return LmEvalResults(
        folder=folder,
        metric=metric,
        scores=scores.drop(columns="key").reset_index(drop=True),
        examples=examples,
        files=sorted(chosen),
        samples_files=sample_files,
        digest=h.hexdigest(),
        groups={g: sorted(kids) for g, kids in sorted(groups.items())},
    )


def _say_missing_tasks(folder: Path, scores: pd.DataFrame, found: set, in_domain: str | None, shown: int = 5) -> None:
    """Warn, naming the files, steps and tasks, where checkpoints lack tasks the others have (a
    missing score there); apart, the checkpoints without the in-domain task, which the analysis
    leaves out (there is no in-domain score to regress on)."""
    lacking = []
    for (model, run, step), g in scores.groupby(["model", "run", "step"], sort=True):
        missing = sorted(found - set(g["testset"]))
        if missing:
            where = f"model {model}" + (f", run {run}" if run != "all" else "") + f", step {step}"
            lacking.append((where, ", ".join(sorted(set(g["file"]))), missing))
    if not lacking:
        return
    n = scores.groupby(["model", "run", "step"]).ngroups

    def listed(items):
        more = f"; and {len(items) - shown} more" if len(items) > shown else ""
        return "; ".join(items[:shown]) + more

    log.warning(
        "%s: %d of %d checkpoints lack tasks the others have (a missing score there): %s",
        folder,
        len(lacking),
        n,
        listed(
            [
                f"{files} ({where}) has no {', '.join(miss[:5])}{' ...' if len(miss) > 5 else ''}"
                for where, files, miss in lacking
            ]
        ),
    )
    no_in_domain = [f"{where} ({files})" for where, files, miss in lacking if in_domain in miss]
    if no_in_domain:
        log.warning(
            "%s: %d checkpoint(s) have no score of the in-domain task %r and are left out of the analysis (there is "
            "nothing to regress their OOD scores on): %s. Evaluate %r at them again to keep them",
            folder,
            len(no_in_domain),
            in_domain,
            listed(no_in_domain),
            in_domain,
        )


def _file_metrics(path: Path, max_bytes: int) -> str:
    doc = load_json(path, max_bytes)
    names = sorted({m.split(",")[0] for v in doc["results"].values() if isinstance(v, dict) for m in metric_names(v)})
    return ", ".join(names) or "no numeric metric"
