"""Metrics beyond accuracy (macro-F1, ECE, Wilson interval) and the scores table that holds them."""

import json
import math

import numpy as np
import pandas as pd
import pytest

from oodcorr.core.errors import ResultError
from oodcorr.jobs import metrics
from oodcorr.jobs.aggregate_scores import COLUMNS, collect


@pytest.mark.parametrize("seed", range(5))
def test_macro_f1_equals_scikit_learn(seed):
    from sklearn.metrics import f1_score

    rng = np.random.default_rng(seed)
    k = 2 + seed % 2
    gold = rng.integers(0, k, 200)
    pred = np.where(rng.random(200) < 0.6, gold, rng.integers(0, k, 200))
    want = f1_score(gold, pred, average="macro", zero_division=0)
    assert metrics.macro_f1(gold, pred) == pytest.approx(want, abs=1e-12)
    # a class predicted but never gold counts, as in scikit-learn (a single-class testset)
    one = np.zeros(10, dtype=int)
    guess = np.array([0] * 7 + [1] * 3)
    assert metrics.macro_f1(one, guess) == pytest.approx(f1_score(one, guess, average="macro", zero_division=0))


def test_macro_f1_by_hand():
    # gold 0 0 0 1 1, pred 0 0 1 1 0: class 0 TP 2 FP 1 FN 1 -> 4/6; class 1 TP 1 FP 1 FN 1 -> 2/4
    assert metrics.macro_f1([0, 0, 0, 1, 1], [0, 0, 1, 1, 0]) == pytest.approx((4 / 6 + 2 / 4) / 2)


def test_ece_by_hand_with_fifteen_equal_bins():
    conf = np.array([0.55, 0.58, 0.95, 0.99, 1.0, 0.7])
    correct = np.array([1, 0, 1, 1, 0, 1])
    # bins of width 1/15: 0.55 and 0.58 share (8/15, 9/15]; 0.7 is in (10/15, 11/15];
    # 0.95, 0.99 and 1.0 share the last, (14/15, 1]
    want = (2 / 6) * abs(0.5 - 0.565) + (1 / 6) * abs(1 - 0.7) + (3 / 6) * abs(2 / 3 - (0.95 + 0.99 + 1.0) / 3)
    assert metrics.ece(conf, correct) == pytest.approx(want, abs=1e-12)
    assert metrics.ece(np.array([0.8] * 5), np.array([1, 1, 1, 1, 0])) == pytest.approx(0.0)  # calibrated
    assert metrics.ECE_BINS == 15


def test_wilson_equals_statsmodels_and_stays_in_zero_one():
    from statsmodels.stats.proportion import proportion_confint

    for k, n in [(0, 10), (3, 10), (10, 10), (28, 60), (513, 1000)]:
        got = metrics.wilson(k, n)
        want = proportion_confint(k, n, alpha=0.05, method="wilson")
        assert got == pytest.approx(want, abs=1e-12), (k, n)
        assert 0 <= got[0] <= k / n <= got[1] <= 1
    assert all(math.isnan(v) for v in metrics.wilson(0, 0))


def test_three_way_model_on_a_two_way_set_is_judged_after_collapsing():
    """A 3-way model on a 2-way testset: predicting neutral or contradiction for a
    non-entailment example is right, so F1 and ECE see the prediction non-entailment, and
    the confidence of that prediction is p(neutral) + p(contradiction)."""
    label_names = ["entailment", "neutral", "contradiction"]
    names = label_names + ["non-entailment"]
    coarse = {"non-entailment": ["neutral", "contradiction"]}
    gold = np.array([3, 3, 0, 0])  # non-ent, non-ent, ent, ent
    pred = np.array([1, 2, 0, 1])  # neutral (right), contradiction (right), ent (right), neutral (wrong)
    correct = np.array([True, True, True, False])
    logits = np.log(np.array([[0.2, 0.5, 0.3], [0.1, 0.3, 0.6], [0.7, 0.2, 0.1], [0.3, 0.4, 0.3]]))
    got = metrics.compute(gold, pred, correct, logits, names, label_names, coarse)
    # collapsed predictions: non-ent, non-ent, ent, non-ent -> ent F1 2/3, non-ent F1 4/5
    assert got["macro_f1"] == pytest.approx((2 / 3 + 4 / 5) / 2)
    assert got["f1_per_label"] == pytest.approx({"entailment": 2 / 3, "non-entailment": 4 / 5})
    conf = [0.8, 0.9, 0.7, 0.7]
    assert got["ece"] == pytest.approx(metrics.ece(np.array(conf), correct))
    # a 3-way testset under the same mode is not collapsed
    gold3 = np.array([1, 2, 0, 0])
    assert metrics.collapse(pred, gold3, names, coarse).tolist() == pred.tolist()


def _write_predictions_without_metrics(path, rec):
    """A predictions file whose record lacks the metrics (as versions before them wrote it)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pandas(pd.DataFrame({"index": [0], "correct": [True]}), preserve_index=False)
    pq.write_table(table.replace_schema_metadata({b"oodcorr": json.dumps(rec).encode()}), path)


def test_a_record_without_the_metrics_is_refused_with_the_files_to_delete(tmp_path):
    """Every evaluation records macro-F1, ECE and the interval; a record without them is of an earlier
    version (or made by hand): refused, naming the file(s) whose deletion reruns that evaluation, in unit
    checkpoint and in a unit-run summary. (Before: completed from its predictions file, with a note in
    a metrics_note column, or left empty with the reason there.)"""
    base = {
        "model": "m",
        "in_domain": "d",
        "n_train": 8,
        "seed": 0,
        "run_id": "m/d/n8/seed0",
        "testset": "t",
        "role": "ood",
        "accuracy": 0.5,
        "n": 2,
        "n_correct": 1,
        "fingerprint": "x",
        "checkpoint": "c",
    }
    old = tmp_path / "old.predictions.parquet"
    _write_predictions_without_metrics(old, dict(base, step=0, predictions=str(old)))
    with pytest.raises(ResultError) as e:
        collect([str(old)])
    assert str(e.value).startswith(f"{old}: evaluation result lacks {list(metrics.COLUMNS)} (written by an earlier")
    assert str(e.value).endswith(f"delete {old} and run again: that evaluation runs again")
    summary = tmp_path / "t.json"
    summary.write_text(json.dumps({"checkpoints": [dict(base, step=0, predictions=str(old))]}))
    with pytest.raises(ResultError, match=rf"checkpoints\[0\]: .*; delete {old} and {summary} and run again"):
        collect([str(summary)])
    whole = dict(base, step=0, predictions=str(old), **dict.fromkeys(metrics.COLUMNS, 0.5))
    _write_predictions_without_metrics(old, whole)
    row = collect([str(old)]).iloc[0]
    assert list(row.index) == COLUMNS and row["macro_f1"] == 0.5 and "metrics_note" not in COLUMNS
