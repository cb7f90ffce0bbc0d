"""Reading a folder of lm-evaluation-harness results into the canonical long table."""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ...core.digests import sha256_files
from ...core.errors import DataError, did_you_mean
from .lmeval_files import MAX_FILES, MAX_RESULTS_BYTES, list_files
from .lmeval_identity import compile_pattern
from .lmeval_results import check_scales, file_metrics, read_results_file
from .lmeval_samples import read_samples
from .score_ranges import is_item_share

log = logging.getLogger(__name__)

RESULTS_NAME = re.compile(r"^results_(?P<date>.+)\.json$")


@dataclass
class LmEvalResults:
    """What :func:`read_folder` read: ``scores``, ``examples`` (None without samples), the files, ``groups``."""

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


# ---- samples ----
def _samples_path(results: Path, task: str) -> Path | None:
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
    """Every results file under ``folder`` -> :class:`LmEvalResults` (see the module's docstring)."""
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
            + f"; e.g. {chosen[0]} has {file_metrics(chosen[0], max_bytes)}: choose one with --metric"
        )
    check_scales(rows)
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
            sp = _samples_path(Path(row["file"]), row["testset"])
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
    digest = sha256_files((rels.get(p, str(p)), p) for p in sorted(set(chosen) | set(sample_files)))
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
        digest=digest,
        groups={g: sorted(kids) for g, kids in sorted(groups.items())},
    )


def _say_missing_tasks(folder: Path, scores: pd.DataFrame, found: set, in_domain: str | None, shown: int = 5) -> None:
    """Warn, naming files, steps and tasks, where checkpoints lack tasks the others have or the in-domain task."""
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
