"""A folder of lm-evaluation-harness results (and the ``--log_samples`` files beside them) read into the canonical
long table; every refusal is a :class:`~oodcorr.core.errors.DataError` naming the file."""

from __future__ import annotations

import json
import logging
import math
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ...core.digests import sha256_files
from ...core.errors import DataError, did_you_mean
from ...core.io import DuplicateKey, loads_json
from .score_ranges import LMEVAL_SHARES_ONLY, is_item_share, metric_range, out_of_range

log = logging.getLogger(__name__)

MAX_FILES = 50_000  # .json and .jsonl files under the folder (--max-files)
MAX_RESULTS_BYTES = 64 * 2**20  # one results file (--max-file-mb)


def list_files(folder: Path, max_files: int = MAX_FILES, follow_links: bool = False) -> tuple[list[Path], list[str]]:
    """Every ``.json``/``.jsonl`` file under ``folder`` (sorted) and the notes of what was not followed."""
    folder = Path(folder)
    if not folder.is_dir():
        what = "does not exist" if not folder.exists() else "is a file, not a folder"
        raise DataError(f"{folder}: {what}; --format lm-eval reads a folder of lm-evaluation-harness results files")
    root = folder.resolve()
    files: list[Path] = []
    notes: list[str] = []
    count = 0
    seen: dict[tuple[int, int], Path] = {}
    stack = [folder]
    while stack:
        d = stack.pop()
        try:
            st = d.stat()
        except PermissionError as e:  # the folder above lists its names, but may not be searched
            raise _not_searchable(d.parent, folder, e) from None
        except OSError as e:
            notes.append(f"{d}: a link that leads to no folder ({e.strerror}): not followed")
            continue
        key = (st.st_dev, st.st_ino)
        if key in seen:
            notes.append(f"{d}: leads to the folder {seen[key]}, already read: not read again")
            continue
        seen[key] = d
        subdirs = []
        try:
            with os.scandir(d) as entries:  # streamed: a folder of millions of names is counted, not held
                for e in entries:
                    try:
                        is_dir = e.is_dir()  # follows links; False for a link that dangles
                    except PermissionError as err:
                        raise _not_searchable(d, folder, err) from None
                    except OSError:
                        is_dir = False  # a link that loops
                    if e.is_symlink() and not follow_links:
                        target = Path(os.path.realpath(e.path))
                        if target != root and root not in target.parents:
                            notes.append(
                                f"{e.path}: a link that leads out of {folder} (to {target}): not followed; pass "
                                "--follow-links to read what it leads to"
                            )
                            continue
                    if is_dir:
                        subdirs.append(Path(e.path))
                        continue
                    if not e.name.endswith((".json", ".jsonl")):
                        if e.is_symlink() and not os.path.exists(e.path):
                            notes.append(f"{e.path}: a link that leads nowhere (a loop or a missing target): skipped")
                        continue
                    count += 1
                    if count <= max_files:
                        files.append(Path(e.path))
        except OSError as e:
            raise DataError(f"{d}: cannot list this folder ({e.strerror}); make it readable or move it out") from None
        stack += sorted(subdirs, reverse=True)  # each folder's subfolders in name order: the same notes each time
    if count > max_files:
        raise DataError(
            f"{folder}: holds {count:,} .json/.jsonl files, more than the {max_files:,} read at most; give a folder "
            f"with only the results to analyse, or pass --max-files {count} to read them all"
        )
    return sorted(files), notes


def _not_searchable(d: Path, folder: Path, e: OSError) -> DataError:
    return DataError(
        f"{d}: cannot look into this folder ({e.strerror}: its names can be listed, but not what they are); make "
        f"it searchable (`chmod a+x {d}`) or move it out of {folder}"
    )


def _regular_size(path: Path) -> int:
    """The size of a file named like the harness's, refused when it is no regular file (a pipe, a device)."""
    st = path.stat()
    if not stat.S_ISREG(st.st_mode):
        raise DataError(f"{path}: not a regular file; move it out of the folder")
    return st.st_size


def _load_json(path: Path, max_bytes: int):
    try:
        size = _regular_size(path)
        if size > max_bytes:
            raise DataError(_too_large(path, size, max_bytes))
        with open(path, "rb") as fh:
            raw = fh.read(max_bytes + 1)
    except OSError as e:
        raise DataError(f"{path}: cannot be read ({e.strerror}); make it readable or move it out") from None
    if len(raw) > max_bytes:
        raise DataError(_too_large(path, len(raw), max_bytes))
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise DataError(f"{path}: not UTF-8 text (byte {e.start}): not an lm-evaluation-harness results file") from None
    if not text.strip():
        raise DataError(f"{path}: is empty; rerun that evaluation or move the file out of the folder")
    try:
        return loads_json(text)
    except DuplicateKey as e:
        raise DataError(f"{path}: {e}; keep one of them, or rerun that evaluation") from None
    except json.JSONDecodeError as e:
        cut = " (it ends early: cut short while being written?)" if e.pos >= len(text.rstrip()) - 1 else ""
        raise DataError(
            f"{path}:{e.lineno}: not valid JSON ({e.msg}, column {e.colno}){cut}; rerun that evaluation or move it out"
        ) from None
    except RecursionError:
        raise DataError(f"{path}: JSON nested too deep to read; not an lm-evaluation-harness results file") from None


def _too_large(path: Path, size: int, max_bytes: int) -> str:
    return (
        f"{path}: {size / 2**20:,.0f} MiB, more than the {max_bytes / 2**20:g} MiB a results file may have; if it "
        f"is one, pass --max-file-mb {math.ceil(size / 2**20)}"
    )


# ---- which model, run and step ----
PLACEHOLDERS = ("model", "run", "step")


def compile_pattern(pattern: str) -> re.Pattern:
    """A path pattern -> a regular expression matched against a file's whole path below the folder."""
    if not pattern or pattern.startswith("/"):
        raise DataError(
            f"--path-pattern {pattern!r}: give a path relative to the folder, e.g. '{{model}}/*_step{{step}}.json'"
        )
    out, seen = [], set()
    for tok in re.split(r"(\{[^}]*\}?|\*\*/|\*)", pattern):
        if tok.startswith("{"):
            name = tok[1:].removesuffix("}")
            if not tok.endswith("}") or name not in PLACEHOLDERS:
                raise DataError(
                    f"--path-pattern {pattern!r}: {{{name}}} is not a placeholder; the placeholders are "
                    f"{', '.join('{' + p + '}' for p in PLACEHOLDERS)}"
                )
            if name in seen:
                raise DataError(f"--path-pattern {pattern!r}: {{{name}}} occurs twice; name each once")
            seen.add(name)
            out.append(f"(?P<{name}>[0-9]+)" if name == "step" else f"(?P<{name}>[^/]+?)")
        else:
            out.append({"**/": "(?:[^/]+/)*", "*": "[^/]*"}.get(tok) or re.escape(tok))
    return re.compile("".join(out) + r"\Z")


def _parse_model_args(v, path: Path) -> dict[str, str]:
    """``config.model_args`` -> mapping: a ``key=value,key=value`` string or a mapping already."""
    if isinstance(v, dict):
        return {str(k): str(x) for k, x in v.items()}
    out = {}
    for part in str(v).split(","):
        if "=" in part:
            k, x = (y.strip() for y in part.split("=", 1))
            if k in out and out[k] != x:
                raise DataError(
                    f"{path}: config.model_args: {k!r} is given twice ({k}={out[k]}, then {k}={x}); rerun it with "
                    "each argument once, or move it out"
                )
            out[k] = x
    return out


# ---- one results file ----
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


_WAY_OUT = "rerun that evaluation, leave the task out (--tasks) or move the file out of the folder"


def _read_results_file(
    path: Path,
    fields: dict | None,
    metric: str,
    tasks: list[str] | None,
    max_bytes: int,
    without: set,
    seen: set,
    groups: dict,
) -> list[dict]:
    """One row per task of one results file (``fields``: what --path-pattern read from its path); adds to
    ``without``, ``seen`` and ``groups`` as it reads."""
    doc = _load_json(path, max_bytes)
    if not isinstance(doc, dict) or not isinstance(doc.get("results"), dict):
        raise DataError(
            f"{path}: not an lm-evaluation-harness results file (no 'results' object); move it out of the folder"
            + (", or give --path-pattern to read only results" if fields is None else " or narrow --path-pattern")
        )
    subtasks = doc.get("group_subtasks")  # group -> its subtasks (absent in the older format)
    lists = isinstance(subtasks, dict) and all(
        isinstance(kids, list) and all(isinstance(k, str) for k in kids) for kids in subtasks.values()
    )
    if subtasks is not None and not lists:
        raise DataError(
            f"{path}: group_subtasks is not an object of task-name lists; rerun that evaluation or move the file out"
        )
    for g, kids in (subtasks or {}).items():
        if kids:
            groups.setdefault(str(g), set()).update(k for k in kids if k != g)
    config = doc.get("config") if isinstance(doc.get("config"), dict) else {}
    # the model, the step and how the step was found, from model_args (and config.model_revision)
    args = _parse_model_args(config.get("model_args"), path)
    adapter = args.get("peft") or args.get("delta")
    model = adapter or args.get("pretrained") or args.get("model") or args.get("path") or None
    revision = None if adapter else args.get("revision") or config.get("model_revision")
    step = None
    how = "no revision" if not revision else f"revision {revision!r}"
    if revision and str(revision) != "main":
        m = re.match(r"^(?:global[_-]?)?step[_-]?(\d+)$|^(\d+)$", str(revision).strip(), re.IGNORECASE)
        step = int(m.group(1) or m.group(2)) if m else None
    elif model:
        tail = model.rstrip("/").rsplit("/", 1)
        m = re.match(r"^(?:checkpoint|(?:global[_-]?)?step)[_-]?(\d+)$", tail[-1], re.IGNORECASE)
        if m and len(tail) == 2:
            model, step, how = tail[0], int(m.group(1)), f"{'peft' if adapter else 'pretrained'} {model!r}"
    run = "all"
    if fields is not None:
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
        key = metric if metric in values else None  # ``acc,none`` or ``acc``; None when absent
        if key is None and "," not in metric:
            keys = [k for k in values if isinstance(k, str) and k.split(",", 1)[0] == metric]
            if len(keys) > 1:
                raise DataError(
                    f"{path}: task {task!r} has metric {metric!r} under several filters ({', '.join(keys)}); name "
                    f"one, e.g. --metric {keys[0]}"
                )
            key = keys[0] if keys else None
        if key is None:
            if tasks is None:
                without.add(task)
                continue  # a task without this metric, when no tasks were named: said once (read_folder)
            raise DataError(
                f"{path}: task {task!r} has no metric {metric!r}; it has {_metric_names(values) or 'none'}: "
                "choose one with --metric, or leave the task out of --tasks"
            )
        v = values[key]
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise DataError(f"{path}: task {task!r}, metric {key!r} is {str(v)[:40]!r}, not a number; {_WAY_OUT}")
        if not math.isfinite(v):
            raise DataError(f"{path}: task {task!r}, metric {key!r} is {v}, not a finite score; {_WAY_OUT}")
        name, _, filt = key.partition(",")
        rng = metric_range(name)
        if rng is not None and (name in LMEVAL_SHARES_ONLY or rng[0] < 0 or rng[1] == math.inf):
            if not rng[0] <= v <= rng[1]:
                raise DataError(
                    f"{path}: task {task!r}, metric {key!r} is {v:g}, outside [{rng[0]:g}, {rng[1]:g}], the range "
                    f"of {name!r}; {_WAY_OUT}"
                )
        se = values.get(f"{name}_stderr" + (f",{filt}" if filt else ""))
        n = n_samples.get(task, {}).get("effective") if isinstance(n_samples.get(task), dict) else None
        rows.append(
            {
                "model": str(model),
                "run": str(run),
                "step": int(step),
                "testset": task,
                "score": float(v),
                "stderr": float(se) if isinstance(se, (int, float)) and not isinstance(se, bool) else math.nan,
                "n": int(n) if isinstance(n, int) and not isinstance(n, bool) else pd.NA,
                "file": str(path),
                "key": key,
            }
        )
    return rows


MAX_SAMPLE_LINE_BYTES = 16 * 2**20  # one line of a samples file


def read_samples(path: Path, key: str, score: float, max_line: int = MAX_SAMPLE_LINE_BYTES) -> pd.DataFrame:
    """(example, correct) of a samples file for ``key`` (``acc,none``: ``acc`` of the lines of filter ``none``)."""
    name, _, filt = key.partition(",")
    ids, vals = [], []
    seen = set()

    def refused(what: str) -> DataError:
        return DataError(f"{path}:{lineno}: {what}; pass --no-samples to analyse without it")

    try:
        _regular_size(path)
        fh = open(path, "rb")
    except OSError as e:
        raise DataError(f"{path}: cannot be read ({e.strerror}); make it readable or pass --no-samples") from None
    with fh:
        for lineno, raw in enumerate(iter(lambda: fh.readline(max_line + 1), b""), 1):
            if len(raw) > max_line:
                raise refused(f"a line longer than {max_line / 2**20:g} MiB")
            if not raw.strip():
                continue
            try:
                rec = loads_json(raw)
            except DuplicateKey as e:
                raise refused(str(e)) from None
            except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as e:
                raise DataError(
                    f"{path}:{lineno}: not a JSON line ({getattr(e, 'msg', type(e).__name__)}; cut short?); rerun "
                    "that evaluation with --log_samples, move the file out, or pass --no-samples"
                ) from None
            if not isinstance(rec, dict):
                raise refused("not a JSON object")
            if filt and str(rec.get("filter", "none")) != filt:
                continue
            if "doc_id" not in rec or name not in rec:
                raise refused(f"no {'doc_id' if 'doc_id' not in rec else repr(name)} in this sample")
            v = rec[name]
            if v is True or v is False:
                v = int(v)
            if not isinstance(v, (int, float)) or v not in (0, 1):
                raise refused(f"{name} is {str(v)[:40]!r}, not 0 or 1, as the example-level bootstrap needs")
            doc = rec["doc_id"]
            doc = doc if isinstance(doc, (int, str)) else json.dumps(doc)
            if doc in seen:
                raise DataError(f"{path}:{lineno}: document {doc!r} occurs twice; pass --no-samples or rerun it")
            seen.add(doc)
            ids.append(doc)
            vals.append(float(v))
    if not vals:
        raise DataError(f"{path}: holds no sample of {key!r}; pass --no-samples to analyse without it")
    mean = sum(vals) / len(vals)
    if abs(mean - score) > 1e-6:
        raise DataError(
            f"{path}: its {len(vals)} samples average {mean:.6f} on {key!r}, but the results file beside it says "
            f"{score:.6f}: not the same evaluation; move it out or pass --no-samples"
        )
    return pd.DataFrame({"example": ids, "correct": vals})


@dataclass
class LmEvalResults:
    """What :func:`read_folder` read: ``scores``, ``examples`` (None without samples), the files, ``groups``."""

    folder: Path
    metric: str
    scores: pd.DataFrame
    examples: pd.DataFrame | None
    samples_files: list[Path] = field(default_factory=list)
    digest: str = ""
    groups: dict[str, list[str]] = field(default_factory=dict)

    def long(self, in_domain: str) -> pd.DataFrame:
        """The canonical long table (:data:`oodcorr.analysis.CANON`) with ``in_domain`` as every run's."""
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
    """The items behind each score: the harness's ``n-samples`` where it wrote them, else read back from its
    standard error of a share, ``sqrt(p (1 - p) / (n - 1))`` (rounded); NaN where neither says."""
    n = pd.to_numeric(n, errors="coerce").astype(float)
    p, se = score.astype(float), pd.to_numeric(stderr, errors="coerce").astype(float)
    with np.errstate(invalid="ignore", divide="ignore"):
        back = np.round(p * (1 - p) / (se * se) + 1)
    back = back.where((se > 0) & np.isfinite(back) & (back >= 1))
    return n.where(n >= 1, back)


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
    """Every results file under ``folder`` -> :class:`LmEvalResults`."""
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
        fields = pattern.match(rels[p]).groupdict() if pattern is not None else None
        for row in _read_results_file(p, fields, metric, tasks, max_bytes, without, seen, groups):
            k = (row["model"], row["run"], row["step"], row["testset"])
            if k in where:
                raise DataError(
                    f"{where[k]} and {p}: both give model {k[0]!r}"
                    + (f", run {k[1]!r}" if k[1] != "all" else "")
                    + f", step {k[2]}, task {k[3]!r}; move one out of the folder, or tell them apart with {{run}} in "
                    "--path-pattern"
                )
            where[k] = p
            rows.append(row)
    if not rows:
        results = _load_json(chosen[0], max_bytes)["results"].values()
        has = sorted({m.split(",")[0] for v in results if isinstance(v, dict) for m in _metric_names(v)})
        raise DataError(
            f"{folder}: no task of the {len(chosen)} results file(s) has the metric {metric!r}"
            + (f" among --tasks {','.join(tasks)}" if tasks else "")
            + f"; e.g. {chosen[0]} has {', '.join(has) or 'no numeric metric'}: choose one with --metric"
        )
    # every score of one metric key on one scale, told by their median: the harness's squad-style ``f1`` is
    # in percent, its ``f1`` of classification a share
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
                f"the other files; {_WAY_OUT}"
            )
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
            m = re.match(r"^results_(?P<date>.+)\.json$", Path(row["file"]).name)  # its samples: same folder, date
            sp = Path(row["file"]).with_name(f"samples_{row['testset']}_{m.group('date')}.jsonl") if m else None
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
            log.info("%s: per-example samples for %d of %d checkpoint x task scores", folder, len(frames), len(rows))
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
        samples_files=sample_files,
        digest=digest,
        groups={g: sorted(kids) for g, kids in sorted(groups.items())},
    )


def _say_missing_tasks(folder: Path, scores: pd.DataFrame, found: set, in_domain: str | None, shown: int = 5) -> None:
    """Warn, naming files, steps and tasks, where checkpoints lack tasks the others have or the in-domain task."""
    lacking = []
    checkpoints = scores.groupby(["model", "run", "step"], sort=True)
    for (model, run, step), g in checkpoints:
        missing = sorted(found - set(g["testset"]))
        if missing:
            where = f"model {model}" + (f", run {run}" if run != "all" else "") + f", step {step}"
            lacking.append((where, ", ".join(sorted(set(g["file"]))), missing))
    if not lacking:
        return

    def listed(items):
        more = f"; and {len(items) - shown} more" if len(items) > shown else ""
        return "; ".join(items[:shown]) + more

    said = [
        f"{files} ({where}) has no {', '.join(miss[:5])}{' ...' if len(miss) > 5 else ''}"
        for where, files, miss in lacking
    ]
    log.warning(
        "%s: %d of %d checkpoints lack tasks the others have (a missing score there): %s",
        folder,
        len(lacking),
        checkpoints.ngroups,
        listed(said),
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
