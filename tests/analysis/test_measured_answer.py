"""The answer about the tasks (oodcorr.analysis.across.measured_answer, agreement_table): which
correlations the ladder reads, near zero through the noise, noise-limited pairs, the tasks'
consensus, and the cells that borrow the corrected cell's check."""

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from oodcorr.analysis import Options, agreement, analyse
from oodcorr.analysis.simulate.items import item_table

OPTS = Options(pool_by=(), example_boot=0, methods=("pearson", "spearman"))
# what item noise adds to the table: without it the answer is the observed scores' (as before)
MEASURED = ("r_eiv", "eiv_from", "task_var_x", "task_var_y", "eiv_var_x", "eiv_var_y", "reliability_x")


def _answer(pc):
    return agreement(pc, OPTS.alpha, OPTS.agreement_correction, OPTS.level, OPTS.near_zero)


@pytest.fixture(scope="module")
def null_study():
    """16 models whose tasks do not correlate (truth 0), an in-domain set of 200 items: the regressed-out
    score is noisy, and both OOD sets load on the in-domain ability."""
    long, ex = item_table(np.random.default_rng(0), [0.0] * 16, 1, 25, (200, 1000, 1000))
    return long, ex, analyse(long, OPTS, ex)


def test_a_noisy_in_domain_set_no_longer_fakes_a_sign(null_study):
    _, _, pc = null_study
    old = _answer(pc.drop(columns=[c for c in MEASURED if c in pc]))
    new = _answer(pc)
    assert set(old["verdict"]) == {"positive on average"}  # the observed scores: a false sign
    assert not new["direction"].str.contains("positive|negative").any()  # the tasks: none
    row = new[new["method"] == "pearson"].iloc[0]
    assert row["about"] == "tasks" and row["r_consensus"] == pytest.approx(old.iloc[0]["r_consensus"])
    assert row["r_consensus_eiv"] < row["r_consensus"] - 0.2  # what the verdict read, beside the observed
    assert row["ci_low_consensus_corrected"] <= 0 <= row["ci_high_consensus_corrected"]
    assert 0.9 < row["reliability_in_domain"] < 1 and "per-item correctness" in row["noise"]


def test_with_sizes_only_a_sign_must_hold_at_both_ends_of_the_bound(null_study):
    long, _, _ = null_study
    pc = analyse(long, OPTS)  # the n column, no per-item data
    new = _answer(pc)
    row = new[new["method"] == "pearson"].iloc[0]
    assert row["about"].startswith("tasks (in-domain noise bounded")
    assert not row["direction"] and math.isnan(row["r_consensus_corrected"])
    runs = pc[(pc["run"] != "pooled") & (pc["method"] == "pearson")]
    assert set(runs["eiv_from"]) == {"bound"}
    # the bound over-corrects: the bound-corrected correlation lies below the observed one in every run
    # (the spline's bound correction is its line's: compared with the line's observed correlation)
    assert (runs["r_eiv"] < runs["r_line"]).all()
    # without sizes either, the answer is the observed scores' and says so
    plain = _answer(analyse(long.drop(columns="n"), OPTS))
    assert plain.iloc[0]["about"].startswith("observed scores") and plain.iloc[0]["verdict"] == "positive on average"


def test_the_uncorrected_cells_borrow_the_corrected_cells_check(null_study):
    _, _, pc = null_study
    new = _answer(pc)
    sp = new[new["method"] == "spearman"].iloc[0]
    assert sp["about"] == "tasks (its statements checked against pearson/spline)"
    old = _answer(pc.drop(columns=[c for c in MEASURED if c in pc]))
    assert old[old["method"] == "spearman"].iloc[0]["direction"].startswith("positive")  # its own ranks say so
    assert not sp["direction"]  # the corrected Pearson cell does not


def test_small_testsets_leave_a_pair_noise_limited_and_name_them():
    long, ex = item_table(np.random.default_rng(0), [0.5] * 16, 1, 25, (2000, 71, 71))
    row = _answer(analyse(long, OPTS, ex)).iloc[0]
    assert row["verdict"] == "noise-limited"
    assert "ood0 (reliability 0." in row["noise_limited"] and "ood1" in row["noise_limited"]
    assert row["reliability_x"] < 0.5 and row["attenuation_low"] < 0.3


def _rows(share, models=12):
    """Run rows and pooled rows of one pair whose cross-fitted correlation is +-0.02 (se_z 0.15) in
    the models, and whose OOD series keep ``share`` of their variance free of item noise."""
    rows = []
    for m in range(models):
        r_eiv = 0.02 if m % 2 else -0.02
        for run in (f"m{m}", "pooled"):
            p = float(2 * stats.norm.sf(abs(np.arctanh(r_eiv)) / 0.15))
            rows.append(
                {
                    "model": f"m{m}",
                    "in_domain": "id",
                    "run": run,
                    "pool_group": "all runs",
                    "x": "a",
                    "y": "b",
                    "method": "pearson",
                    "residualiser": "linear",
                    **{f"{k}{s}": v for s in ("", "_eiv") for k, v in (("r", r_eiv), ("se_z", 0.15), ("p", p))},
                    "ci_low": r_eiv - 0.1,
                    "ci_high": r_eiv + 0.1,
                    "eiv_from": "items",
                    "n_runs_finite": 1,
                    **{
                        f"{k}_{s}": v
                        for s in "xy"
                        for k, v in (("task_var", share), ("eiv_var", 1.0), ("obs_var", 1.0))
                    },
                    "task_cov": r_eiv,
                    **{f"reliability_{s}": share for s in "xy"},
                    **{f"reliability_{s}_low": share - 0.05 for s in "xy"},
                    "reliability_in_domain": 0.99,
                    "reliability_in_domain_low": 0.98,
                    "noise": "items",
                }
            )
    rng = np.random.default_rng(1)
    df = pd.DataFrame(rows)
    jitter = rng.normal(0, 0.01, len(df))
    for c in ("task_var_x", "task_var_y"):
        df[c] = df[c] + jitter
    return df


def test_near_zero_is_judged_through_the_noise():
    # cross-fitted correlations of +-0.02: near zero when the series are free of noise ...
    assert _answer(_rows(0.95)).iloc[0]["verdict"] == "agree near zero"
    # ... but with a fifth of their variance left, a correlation of 0.3 between the tasks would look like
    # 0.06, inside what the models' spread allows (a further model expected within +-0.1)
    row = _answer(_rows(0.2)).iloc[0]
    assert "near zero" not in row["verdict"] and row["attenuation_low"] < 0.25
