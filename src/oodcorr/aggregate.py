"""Collect evaluation results into one long scores table, a row per checkpoint x testset.

The records come from the predictions files themselves (each holds its record in its
parquet metadata; ``evaluation.unit: checkpoint``) or from the summary JSON that an
evaluation job of ``evaluation.unit: run`` writes beside the predictions files it lists.
"""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from .io import atomic_path

COLUMNS = ["model", "in_domain", "n_train", "seed", "run_id", "step", "testset", "role",
           "accuracy", "n", "n_correct", "fingerprint", "checkpoint", "predictions"]


def _records(path: str) -> tuple[list[dict], bool]:
    """(records, whether the file is a summary) of a predictions parquet or a job summary JSON."""
    if str(path).endswith(".parquet"):
        from .evaluate import read_result

        try:
            return [read_result(path)], False
        except Exception as e:  # noqa: BLE001 -- any damage: name the file and the way out
            raise ValueError(f"{path}: unreadable predictions file ({type(e).__name__}: {e}); delete it and "
                             "rerun: only that evaluation runs again") from None
    with open(path, encoding="utf-8") as fh:
        try:
            doc = json.load(fh)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}: unreadable evaluation result ({e.msg}); delete it and rerun") from None
    if not (isinstance(doc, dict) and isinstance(doc.get("checkpoints"), list)):
        raise ValueError(f"{path}: not an evaluation summary (no 'checkpoints' list); delete it and rerun")
    return doc["checkpoints"], True


def collect(paths: list[str]) -> pd.DataFrame:
    """Rows from predictions files (their metadata records) and evaluation job summaries."""
    rows = []
    for p in paths:
        records, summary = _records(p)
        for i, r in enumerate(records):
            missing = [c for c in COLUMNS if c not in r]
            if missing:
                raise ValueError(f"{p}{f': checkpoints[{i}]' if summary else ''}: evaluation result lacks {missing}")
            if summary and not Path(r["predictions"]).exists():
                raise ValueError(f"{r['predictions']} is missing (listed in {p}); delete {p} and rerun: that "
                                 "evaluation job scores only the checkpoints whose predictions are missing")
            rows.append({c: r[c] for c in COLUMNS})
    df = pd.DataFrame(rows, columns=COLUMNS)
    return df.sort_values(["model", "in_domain", "n_train", "seed", "step", "role", "testset"],
                          ignore_index=True)


def write_scores(df: pd.DataFrame, parquet: str, csv: str) -> None:
    for path, writer in ((parquet, lambda t: df.to_parquet(t, index=False)),
                         (csv, lambda t: df.to_csv(t, index=False))):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(path) as tmp:
            writer(tmp)
