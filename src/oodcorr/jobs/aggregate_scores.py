"""Collect evaluation results into one long scores table, a row per checkpoint x testset."""

from __future__ import annotations

import contextlib
import html
import json
import os
import re
import string
from pathlib import Path

import pandas as pd

from ..core.atomic_write import atomic_path, write_text_atomic
from ..core.errors import ResultError
from ..core.records import local_source_changed, read_result
from ..core.seals import check_staged, remake_hint
from ..core.token_cache import cache_info_path
from ..planning.layout import Paths
from . import metrics

# a record's fields, in the scores table's order: which checkpoint it scores, what it scored, where it came from
_CHECKPOINT = ["model", "in_domain", "n_train", "seed", "run_id", "step"]
_SCORE = ["testset", "role", "accuracy", "n", "n_correct"]
_PROVENANCE = ["fingerprint", "checkpoint", "predictions"]
REQUIRED = [*_CHECKPOINT, *_SCORE, *metrics.COLUMNS, *_PROVENANCE]  # what every record has
# the scores table: those fields and a series' x unit (a finetuned run's record has none: "step")
COLUMNS = [*_CHECKPOINT, "x_unit", *_SCORE, *metrics.COLUMNS, *_PROVENANCE]


def _records(path: str) -> tuple[list[dict], bool]:
    """(records, whether the file is a summary) of a predictions parquet or a job summary JSON."""
    if str(path).endswith(".parquet"):
        try:
            return [read_result(path)], False
        except Exception as e:  # noqa: BLE001 -- any damage: name the file and the way out
            raise ResultError(
                f"{path}: unreadable predictions file ({type(e).__name__}: {e}); delete it and "
                "rerun: only that evaluation runs again"
            ) from None
    with open(path, encoding="utf-8") as fh:
        try:
            doc = json.load(fh)
        except json.JSONDecodeError as e:
            raise ResultError(f"{path}: unreadable evaluation result ({e.msg}); delete it and rerun") from None
    if not (isinstance(doc, dict) and isinstance(doc.get("checkpoints"), list)):
        raise ResultError(f"{path}: not an evaluation summary (no 'checkpoints' list); delete it and rerun")
    return doc["checkpoints"], True


def collect(
    paths: list[str],
    data: dict | None = None,
    places: dict | None = None,
    keep_records: list | None = None,
) -> pd.DataFrame:
    """Rows from predictions files (their metadata records) and evaluation job summaries."""
    rows, checked = [], []
    for p in paths:
        records, summary = _records(p)
        for i, r in enumerate(records):
            missing = [c for c in REQUIRED if c not in r]
            if missing:
                pred = r.get("predictions")
                delete = f"{pred} and {p}" if summary and pred else p
                raise ResultError(
                    f"{p}{f': checkpoints[{i}]' if summary else ''}: evaluation result lacks {missing} (written by "
                    f"an earlier version of oodcorr, or by hand); delete {delete} and run again: that evaluation "
                    "runs again"
                )
            if summary and not Path(r["predictions"]).exists():
                raise ResultError(
                    f"{r['predictions']} is missing (listed in {p}); delete {p} and rerun: that "
                    "evaluation job scores only the checkpoints whose predictions are missing"
                )
            check_place(p, r, summary, places)
            checked.append((r["predictions"] if summary else p, r))
            if keep_records is not None:
                keep_records.append(r)
            rows.append({c: r.get(c, "step" if c == "x_unit" else None) for c in COLUMNS})
    if data:
        check_data(checked, data["records"], data["meta"])
    df = pd.DataFrame(rows, columns=COLUMNS)
    return df.sort_values(["model", "in_domain", "n_train", "seed", "step", "role", "testset"], ignore_index=True)


def _norm(path) -> str:
    return os.path.normpath(str(path))


def _what(r: dict) -> str:
    return (
        f"run {r.get('run_id')}, step {r.get('step')}, testset {r.get('testset')!r} (written as {r.get('predictions')})"
    )


def check_place(path: str, r: dict, summary: bool, places: dict | None) -> None:
    """A record must belong where it is read from (``places``: its run, step, testset, checkpoint); else ResultError."""
    pred = _norm(r["predictions"])
    if not summary and pred != _norm(path):
        raise ResultError(
            f"{path}: holds the evaluation of {_what(r)}, not of the checkpoint and testset whose file it is (it "
            "was copied over it?), so it is not aggregated; delete it and run again: that evaluation runs again"
        )
    if not places:
        return
    # the layout's path pattern (oodcorr.planning.layout.Paths), its {field}s read back
    parts = string.Formatter().parse(places["summary" if summary else "predictions"])
    body = "".join(re.escape(text) + (f"(?P<{field}>[^/]+)" if field else "") for text, field, _, _ in parts)
    m = re.match(f"^{body}$", _norm(path))
    if m is None:
        raise ResultError(f"{path}: not where this experiment keeps its evaluation results; it is not aggregated")
    place = m.groupdict()
    run_id = f"{place['model']}/{place['indomain']}/n{place['ntrain']}/seed{place['seed']}"
    step = place.get("step", r.get("step"))
    want = {
        "model": place["model"],
        "in_domain": place["indomain"],
        "n_train": place["ntrain"],
        "seed": place["seed"],
        "run_id": run_id,
        "step": step,
        "testset": place["testset"],
    }
    series = (places.get("series") or {}).get(place["model"])
    where = series.get(str(step)) if series is not None else places["checkpoint"].format_map(place | {"step": step})
    expected_pred = places["predictions"].format_map(place | {"step": step})
    wrong = [k for k, v in want.items() if str(r.get(k)) != str(v)]
    if wrong == ["testset"] and pred == _norm(expected_pred):
        # written here by its own evaluation job, which read another testset's tokenised cache (two swapped):
        # deleting this file alone would evaluate that cache again
        cache = Paths(places["predictions"].split("/eval/", 1)[0]).tokenized.format(
            model=place["model"], testset=place["testset"]
        )
        raise ResultError(
            f"{path}: holds {_what(r)}, but sits where testset {place['testset']!r} of run {run_id} belongs, and its "
            f"evaluation job wrote it there: the tokenised testset it read, {cache}, holds testset "
            f"{r.get('testset')!r}. Delete {cache}, {cache_info_path(cache)} and {path}, and run again"
        )
    if wrong or pred != _norm(expected_pred) or (where is not None and _norm(r["checkpoint"]) != _norm(where)):
        what = "the evaluation job's summary of" if summary else "the evaluation of"
        raise ResultError(
            f"{path}: holds {_what(r)} (checkpoint {r.get('checkpoint')}), but sits where {what} run {run_id}"
            + ("" if summary else f", step {step}")
            + f", testset {place['testset']!r} belongs (it was copied over it?), so it is not aggregated; delete "
            f"it and run again: that evaluation runs again"
        )
    if summary:
        try:
            own = read_result(r["predictions"])
        except Exception as e:  # noqa: BLE001 -- any damage: name the file and the way out
            raise ResultError(
                f"{r['predictions']}: unreadable predictions file ({type(e).__name__}: {e}); delete it and {path}, "
                "and run again: that evaluation job scores the checkpoints whose predictions are missing"
            ) from None
        keys = ["run_id", "step", "testset", "predictions", "n_correct", "n"]
        keys += ["eval_key"] if r.get("eval_key") and own.get("eval_key") else []
        if any(str(own.get(k)) != str(r.get(k)) for k in keys):
            raise ResultError(
                f"{r['predictions']}: holds the evaluation of {_what(own)}, not the one {path} lists for it; delete it "
                f"and {path}, and run again: that evaluation job scores the checkpoints whose predictions are missing"
            )


def _short(h) -> str:
    return f"{str(h)[:12]}..." if h else "none"


def check_data(records: list[tuple[str, dict]], data_pattern: str, meta_pattern: str) -> None:
    """Every ``(file, record)`` was evaluated on its testset as prepared now, from its file as it is now."""
    by_testset: dict[str, list[tuple[str, dict]]] = {}
    for where, r in records:
        by_testset.setdefault(str(r["testset"]), []).append((where, r))
    for testset, recs in sorted(by_testset.items()):
        meta_path = Path(meta_pattern.format(dataset=testset))
        data_path = Path(data_pattern.format(dataset=testset))
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise ResultError(
                f"{meta_path}: cannot read the prepared testset's description ({e}) to check the evaluations on "
                f"{testset!r}; delete {data_path} and rerun: the testset is prepared again and evaluated on"
            ) from None
        want = (meta.get("fingerprint"), meta.get("records_sha256"))
        stale = [(w, r) for w, r in recs if (r.get("fingerprint"), r.get("records_sha256")) != want]
        if stale:
            w, r = stale[0]
            raise ResultError(
                f"{w}: evaluated on testset {testset!r} as it was prepared before (fingerprint {r.get('fingerprint')}, "
                f"records {_short(r.get('records_sha256'))}), but {meta_path} now says fingerprint {want[0]}, records "
                f"{_short(want[1])}: {len(stale)} of {len(recs)} evaluations on it are stale. Run `touch {data_path}` "
                "and run again: its tokenisation and every evaluation on it run again"
            )
        changed = local_source_changed(meta)
        if changed:
            raise ResultError(
                f"{changed}, and its modification time did not change, so the workflow kept the "
                f"evaluations of the old file. Run `touch {meta['path']}` and run again: the testset is "
                "prepared, tokenised and evaluated again"
            )


def read_scores(path: str) -> pd.DataFrame:
    """The scores table the analysis reads; a damaged one is a :class:`ResultError` naming it and the way out."""
    how = remake_hint("rule aggregate_scores", "the evaluations")
    with contextlib.suppress(FileNotFoundError):
        check_staged(path, "rule aggregate_scores", "the evaluations")
    try:
        df = pd.read_parquet(path)
    except Exception as e:  # noqa: BLE001 -- truncated, overwritten, not parquet: name it and the way out
        raise ResultError(f"{path}: not a readable scores table ({type(e).__name__}: {e}); {how}") from None
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise ResultError(f"{path}: the scores table lacks column(s) {missing}; {how}")
    return df


def read_analysis_table(path: str) -> pd.DataFrame:
    """A table rule partial_correlations staged, read back; a damaged one is a :class:`ResultError` naming it."""
    made_by, source = "rule partial_correlations", "the scores table"
    check_staged(path, made_by, source)
    try:
        return pd.read_csv(path, keep_default_na=False, na_values=[""])
    except (OSError, ValueError) as e:  # pandas' ParserError and EmptyDataError are ValueErrors
        raise ResultError(
            f"{path}: not a readable table ({type(e).__name__}: {str(e)[:160]}); {remake_hint(made_by, source)}"
        ) from None


def write_scores(df: pd.DataFrame, parquet: str, csv: str) -> None:
    with atomic_path(parquet) as tmp:
        df.to_parquet(tmp, index=False)
    write_text_atomic(csv, df.to_csv(index=False))


RUN_KEYS = ["model", "in_domain", "n_train", "seed"]


def accuracy_table(scores):
    """One row per run x checkpoint, one column per testset (in-domain first), accuracy in the cells."""
    order = (
        scores.sort_values("role", key=lambda r: r.ne("in-domain"))  # the in-domain set first
        .drop_duplicates("testset")["testset"]
        .tolist()
    )
    wide = scores.pivot_table(index=RUN_KEYS + ["step"], columns="testset", values="accuracy", aggfunc="first")
    wide = wide.reindex(columns=[t for t in order if t in wide.columns])
    wide.columns.name = None
    return wide.reset_index().sort_values(RUN_KEYS + ["step"], ignore_index=True)


def write_accuracy(scores, out_html: str, out_csv: str, experiment: str) -> dict:
    """The accuracy table as CSV and as an HTML page (one table per run) for the report."""
    wide = accuracy_table(scores)
    write_text_atomic(out_csv, wide.to_csv(index=False))
    testsets = [c for c in wide.columns if c not in RUN_KEYS + ["step"]]
    info = scores.drop_duplicates("testset").set_index("testset")
    head = "".join(
        f"<th>{html.escape(t)}<br><small>{html.escape(str(info.at[t, 'role']))}, n={int(info.at[t, 'n'])}</small></th>"
        for t in testsets
    )
    parts = [
        f"<h1>Accuracy per checkpoint: {html.escape(experiment)}</h1>",
        "<p>Share of each testset's examples classified correctly at each saved checkpoint "
        "(step 0: before any update). The same numbers are in accuracy.csv and, one row per "
        "checkpoint x testset with counts and provenance, scores.csv.</p>",
    ]
    for key, g in wide.groupby(RUN_KEYS, sort=True):
        model, dom, n, seed = key
        rows = "".join(
            "<tr><td>{}</td>{}</tr>".format(
                int(r["step"]), "".join(f"<td>{'' if pd.isna(r[t]) else f'{r[t]:.3f}'}</td>" for t in testsets)
            )
            for _, r in g.iterrows()
        )
        parts.append(
            f"<h2>{html.escape(str(model))}, in-domain {html.escape(str(dom))}, n_train {n}, seed {seed}</h2>"
            f"<table><thead><tr><th>step</th>{head}</tr></thead><tbody>{rows}</tbody></table>"
        )
    style = (
        "body{font-family:sans-serif;font-size:13px} table{border-collapse:collapse;margin-bottom:1.5em}"
        "td,th{border:1px solid #ccc;padding:2px 8px;text-align:right} th{background:#f3f3f3}"
    )
    write_text_atomic(
        out_html,
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><style>{style}</style>"
        f"</head><body>{''.join(parts)}</body></html>\n",
    )
    return {"runs": int(wide.groupby(RUN_KEYS).ngroups), "rows": len(wide), "testsets": testsets}
