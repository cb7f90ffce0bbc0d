"""Collect evaluation results into one long scores table.

Each evaluation job (one run x one testset) writes a summary JSON listing every
checkpoint's result record; the table has a row per record.
"""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from .io import atomic_path

COLUMNS = ["model", "in_domain", "n_train", "seed", "run_id", "step", "testset", "role",
           "accuracy", "n", "n_correct", "fingerprint", "checkpoint", "predictions"]


def collect(paths: list[str]) -> pd.DataFrame:
    """Rows from evaluation summaries (``{"checkpoints": [record, ...]}``) or single records."""
    rows = []
    for p in paths:
        with open(p, encoding="utf-8") as fh:
            try:
                doc = json.load(fh)
            except json.JSONDecodeError as e:
                raise ValueError(f"{p}: unreadable evaluation result ({e.msg}); delete it and rerun") from None
        summary = isinstance(doc, dict) and "checkpoints" in doc
        for i, r in enumerate(doc["checkpoints"] if summary else [doc]):
            missing = [c for c in COLUMNS if c not in r]
            if missing:
                raise ValueError(f"{p}{f': checkpoints[{i}]' if summary else ''}: evaluation result lacks {missing}")
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
