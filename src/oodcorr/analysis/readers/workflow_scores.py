"""The workflow's scores table (``results/<experiment>/scores.parquet``) and the predictions files it names."""

from __future__ import annotations

import pandas as pd

from ...core.errors import DataError
from .score_ranges import is_item_share, out_of_range

# Per-example correctness gives accuracy, not the workflow's other metric columns (oodcorr.jobs.metrics.COLUMNS;
# tests/planning/test_config.py ties them): item noise and the example-level bootstrap do not apply to these.
NOT_ACCURACY = ("macro_f1", "ece", "accuracy_ci_low", "accuracy_ci_high")


def example_bootstrap_applies(score: str) -> bool:
    return score not in NOT_ACCURACY


def from_scores(scores: pd.DataFrame, score: str = "accuracy") -> tuple[pd.DataFrame, pd.DataFrame]:
    """The workflow's scores table -> (canonical long table, run info: run, n_train, seed)."""
    need = ["model", "run_id", "step", "testset", "role", score]
    missing = [c for c in need if c not in scores.columns]
    if missing:
        hint = "; rerun the aggregation (snakemake --forcerun aggregate_scores)" if score in missing else ""
        raise DataError(f"scores table lacks column(s) {missing}{hint}")
    bad = out_of_range(scores[[score]], score, percent=False)  # the workflow writes shares
    if bad is not None:
        i, _, value, why = bad
        row = scores.loc[i]
        raise DataError(
            f"scores table: run {row['run_id']}, step {row['step']}, testset {row['testset']!r}: {score} {value:g} is "
            f"{why}: not a score the workflow computes; delete the table and run again (rule aggregate_scores makes "
            "it again from the evaluations)"
        )
    ind = scores[scores["role"] == "in-domain"].groupby("run_id")["testset"].unique()
    zname = {r: (v[0] if len(v) == 1 else "") for r, v in ind.items()}
    long = pd.DataFrame(
        {
            "model": scores["model"].astype(str),
            "in_domain": scores["run_id"].map(zname).fillna(""),
            "run": scores["run_id"].astype(str),
            "unit": scores["step"].astype(int),
            "testset": scores["testset"].astype(str),
            "score": scores[score].astype(float),
        }
    )
    if "n" in scores.columns and is_item_share(score):
        long["n"] = pd.to_numeric(scores["n"], errors="coerce").astype(float)  # items behind each score
    info_cols = [c for c in ("n_train", "seed") if c in scores.columns]
    info = scores[["run_id", *info_cols]].drop_duplicates("run_id").rename(columns={"run_id": "run"})
    return long, info


def examples_from_predictions(scores: pd.DataFrame) -> pd.DataFrame:
    """Per-example correctness from the workflow's scores table."""
    need = ["model", "run_id", "step", "testset", "predictions"]
    missing = [c for c in need if c not in scores.columns]
    if missing:
        raise DataError(f"scores table: no column(s) {missing}; rerun the workflow to rebuild it")
    frames = []
    for row in scores[need].itertuples(index=False):
        try:
            pred = pd.read_parquet(row.predictions)
        except Exception as e:  # noqa: BLE001 -- gone or damaged: name the file and the way out
            raise DataError(
                f"{row.predictions}: cannot read these per-example predictions ({type(e).__name__}: "
                f"{e}); delete it (if it is still there) and run again: that evaluation runs again"
            ) from None
        frames.append(
            pd.DataFrame(
                {
                    "model": str(row.model),
                    "run": str(row.run_id),
                    "unit": int(row.step),
                    "testset": str(row.testset),
                    "example": pred["index"].to_numpy(),
                    "correct": pred["correct"].to_numpy(float),
                    # the gold label: testsets are sampled per label, so their split halves are drawn
                    # within labels too (item_noise.half_means); a file without labels: one stratum
                    "stratum": (pred["label"] if "label" in pred.columns else pd.Series("", index=pred.index))
                    .astype(str)
                    .to_numpy(),
                }
            )
        )
    if not frames:
        return pd.DataFrame(columns=["model", "run", "unit", "testset", "example", "correct", "stratum"])
    return pd.concat(frames, ignore_index=True)
