"""Collect evaluation results into one long scores table, a row per checkpoint x testset.

The records come from the predictions files themselves (each holds its record in its
parquet metadata; ``evaluation.unit: checkpoint``) or from the summary JSON that an
evaluation job of ``evaluation.unit: run`` writes beside the predictions files it lists.

Besides accuracy, each row has the metrics of :mod:`oodcorr.metrics` (macro-F1, ECE and
accuracy's Wilson interval). A record written before those existed is completed from its
per-example predictions file (gold label, prediction, correctness and label scores are
all there), and ``metrics_note`` says so; where that file cannot be read, macro-F1 and ECE
stay empty and ``metrics_note`` says why (the interval needs only the counts).
"""
from __future__ import annotations

import json
import logging
from pathlib import Path

import pandas as pd

from . import metrics
from .io import atomic_path

log = logging.getLogger(__name__)

# what every record has (records of every version)
REQUIRED = ["model", "in_domain", "n_train", "seed", "run_id", "step", "testset", "role",
            "accuracy", "n", "n_correct", "fingerprint", "checkpoint", "predictions"]
COLUMNS = ["model", "in_domain", "n_train", "seed", "run_id", "step", "x_unit", "testset", "role",
           "accuracy", "n", "n_correct", *metrics.COLUMNS, "metrics_note", "fingerprint", "checkpoint",
           "predictions"]
RECOMPUTED = "macro_f1 and ece recomputed from the predictions file (its record predates them)"


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


def collect(paths: list[str], coarse: dict | None = None) -> pd.DataFrame:
    """Rows from predictions files (their metadata records) and evaluation job summaries.

    ``coarse`` is the experiment's label mode's collapse rule (its ``coarse`` map), used
    for records that predate the metrics and do not carry it themselves."""
    rows = []
    n_old = 0
    for p in paths:
        records, summary = _records(p)
        for i, r in enumerate(records):
            missing = [c for c in REQUIRED if c not in r]
            if missing:
                raise ValueError(f"{p}{f': checkpoints[{i}]' if summary else ''}: evaluation result lacks {missing}")
            if summary and not Path(r["predictions"]).exists():
                raise ValueError(f"{r['predictions']} is missing (listed in {p}); delete {p} and rerun: that "
                                 "evaluation job scores only the checkpoints whose predictions are missing")
            if "macro_f1" not in r:
                n_old += 1
                r = dict(r, **_metrics_from_predictions(r, coarse))
            rows.append({c: r.get(c, _DEFAULTS.get(c)) for c in COLUMNS})
    if n_old:
        log.warning("%d record(s) predate macro-F1/ECE: completed from their predictions files where readable "
                    "(column metrics_note)", n_old)
    df = pd.DataFrame(rows, columns=COLUMNS)
    return df.sort_values(["model", "in_domain", "n_train", "seed", "step", "role", "testset"],
                          ignore_index=True)


_DEFAULTS = {"x_unit": "step", "metrics_note": ""}


def _metrics_from_predictions(rec: dict, coarse: dict | None) -> dict:
    """The metrics of a record that predates them, from its per-example predictions file."""
    import numpy as np

    low, high = metrics.wilson(int(rec["n_correct"]), int(rec["n"]))
    out = {"accuracy_ci_low": low, "accuracy_ci_high": high, "macro_f1": float("nan"), "ece": float("nan")}
    try:
        pred = pd.read_parquet(rec["predictions"])
    except Exception as e:  # noqa: BLE001 -- any damage: the metrics stay empty, and the note says why
        return dict(out, metrics_note=f"macro_f1 and ece not available: {rec['predictions']} unreadable "
                                      f"({type(e).__name__})")
    label_names = [c[len("logit_"):] for c in pred.columns if c.startswith("logit_")]
    if not label_names or not {"label", "pred", "correct"} <= set(pred.columns):
        return dict(out, metrics_note=f"macro_f1 and ece not available: {rec['predictions']} lacks the label, "
                                      "prediction or score columns")
    coarse = rec.get("coarse", coarse) or {}
    names = label_names + sorted((set(pred["label"]) | set(coarse)) - set(label_names))
    index = {name: i for i, name in enumerate(names)}
    logits = pred[[f"logit_{n}" for n in label_names]].to_numpy(np.float64)
    got = metrics.compute(pred["label"].map(index).to_numpy(), pred["pred"].map(index).to_numpy(),
                          pred["correct"].to_numpy(bool), logits, names, label_names, coarse)
    return dict(out, macro_f1=got["macro_f1"], ece=got["ece"], metrics_note=RECOMPUTED)


def write_scores(df: pd.DataFrame, parquet: str, csv: str) -> None:
    for path, writer in ((parquet, lambda t: df.to_parquet(t, index=False)),
                         (csv, lambda t: df.to_csv(t, index=False))):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(path) as tmp:
            writer(tmp)
