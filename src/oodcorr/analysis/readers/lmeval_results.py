"""One lm-evaluation-harness results file read into rows (:func:`read_results_file`), for
:mod:`.lmeval`, which reads a folder of them: the file's format (the current ``acc,none`` keys or the
older ``acc``), the metric found by name and filter (:func:`_metric_names` lists a task's), the model,
run and step it holds (:mod:`.lmeval_identity`, or the path pattern), its groups
(``group_subtasks``), and every score checked: a number, finite, within its metric's range, and
every score of one metric on one scale across the files (:func:`check_scales`). Every refusal is a
:class:`~oodcorr.core.errors.DataError` naming the file and the task."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pandas as pd

from ...core.errors import DataError
from .lmeval_files import MAX_RESULTS_BYTES, load_json
from .lmeval_identity import identity, parse_model_args
from .score_ranges import LMEVAL_SHARES_ONLY, metric_range, out_of_range


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


def _metric_names(values: dict) -> list[str]:
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


def check_scales(rows: list[dict]) -> None:
    """The metrics that may be shares or percentages (the harness's squad-style ``f1`` is in percent,
    its ``f1`` of classification a share): every score of one metric key is on one scale, told by
    their median (:func:`oodcorr.analysis.readers.score_ranges._score_range`); one outside it names its file."""
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
    """One row per task of one results file; adds to ``without``, ``seen`` and ``groups`` as it reads."""
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
                f"{path}: task {task!r} has no metric {metric!r}; it has {_metric_names(values) or 'none'}: "
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


def file_metrics(path: Path, max_bytes: int) -> str:
    doc = load_json(path, max_bytes)
    names = sorted({m.split(",")[0] for v in doc["results"].values() if isinstance(v, dict) for m in _metric_names(v)})
    return ", ".join(names) or "no numeric metric"
