"""The answer across models (oodcorr.analysis.across.consensus): the two-level model by hand, and each
verdict's rule, its reason and its way on (oodcorr.core.answer) pinned on a small constructed table
(one test per word)."""

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from oodcorr.analysis import agreement
from oodcorr.analysis.across.multitest import bh, holm, simes
from oodcorr.analysis.across.predictive import SINGLE_RUN_SCALE
from oodcorr.core import answer

from helpers import between_runs, consensus, model_means, predictive, reversal_p, tau2_upper, tolerance


def _runs(spec, pair=("x", "y"), se=0.1):
    """{model: [r per run]} -> run rows and pooled rows of one pair, each run with se_z ``se``
    and the p of z / se on a normal (the pooled row: the runs' Fisher mean, marked significant
    when every run is)."""
    rows = []
    for model, rs in spec.items():
        for i, r in enumerate(rs):
            p = float(2 * stats.norm.sf(abs(np.arctanh(r)) / se)) if np.isfinite(r) else math.nan
            rows.append(_row(model, f"{model}/{i}", pair, r, se if np.isfinite(r) else math.nan, p))
        fin = [r for r in rs if np.isfinite(r)]
        pooled_r = float(np.tanh(np.mean(np.arctanh(fin)))) if fin else math.nan
        rows.append(_row(model, "pooled", pair, pooled_r, math.nan, math.nan))
    return pd.DataFrame(rows)


def _row(model, run, pair, r, se, p):
    return {
        "model": model,
        "in_domain": "d",
        "run": run,
        "pool_group": "all runs",
        "x": pair[0],
        "y": pair[1],
        "method": "pearson",
        "residualiser": "linear",
        "r": r,
        "se_z": se,
        "p": p,
        "ci_low": math.nan,
        "ci_high": math.nan,
        "significant": False,
    }


def _verdict(table, correction="holm", **kw):
    a = agreement(table, 0.05, correction, **kw)
    assert len(a) == 1
    return a.iloc[0]


def _why(row) -> tuple[str, str]:
    """The row's reason and way on (agreement.csv's ``reason`` and ``way_on``), each a non-empty text."""
    assert isinstance(row["reason"], str) and row["reason"] and isinstance(row["way_on"], str) and row["way_on"]
    return row["reason"], row["way_on"]


# ---- the model by hand ------------------------------------------------------------------------
def test_between_run_variance_solves_the_generalised_q():
    z = np.array([0.1, 0.5, 0.9, -0.2, 0.4, 0.0])
    v = np.full(6, 0.01)
    model = np.array(["a", "a", "a", "b", "b", "b"])
    t2, df, q = between_runs(z, v, model)
    assert df == 4 and q == 1.0 and t2 > 0
    total = 0.0
    for m in ("a", "b"):
        g, w = z[model == m], 1 / (v[model == m] + t2)
        total += (w * (g - (w * g).sum() / w.sum()) ** 2).sum()
    assert total == pytest.approx(4, rel=1e-8)
    # runs that agree more closely than their within-run variances say: no between-run variance
    t2, df, q = between_runs(np.array([0.3, 0.31, -0.1, -0.11]), np.full(4, 0.04), np.array(["a", "a", "b", "b"]))
    assert (t2, df) == (0.0, 2) and q < 1
    # one run per model: nothing to estimate it from
    assert between_runs(np.array([0.1, 0.2]), np.full(2, 0.01), np.array(["a", "b"])) == (
        0.0,
        0,
        pytest.approx(math.nan, nan_ok=True),
    )


def test_model_means_and_their_tests():
    z = np.array([0.5, 0.7, -0.3, -0.1])
    v = np.array([0.02, 0.03, 0.02, 0.02])
    model = np.array(["a", "a", "b", "b"])
    names, zm, Vm, pm, t2, df, q = model_means(z, v, model, np.full(4, np.nan))
    assert names == ["a", "b"] and df == 2
    w = 1 / (v + t2)
    assert zm[0] == pytest.approx((w[:2] * z[:2]).sum() / w[:2].sum())
    assert Vm[1] == pytest.approx(1 / w[2:].sum())
    # a t-test on the runs' shared degrees of freedom, its scale at least the within-run one
    assert pm[0] == pytest.approx(2 * stats.t.sf(abs(zm[0]) / math.sqrt(Vm[0] * max(q, 1)), df))
    # one run per model and nothing to borrow: each model keeps its run's own p
    _, _, _, pm1, *_ = model_means(
        np.array([0.5, -0.3]), np.array([0.02, 0.02]), np.array(["a", "b"]), np.array([0.01, 0.2])
    )
    assert list(pm1) == [0.01, 0.2]


def test_consensus_prediction_interval_by_hand():
    # models that agree within their noise (Q 2.5 on 4 df): no between-model variance estimated;
    # the consensus interval is the normal one
    zm, Vm = np.array([-0.5, -0.3, -0.45, -0.35, -0.4]), np.full(5, 0.01)
    c = consensus(zm, Vm, 0.95)
    assert c["pi_scale"] == 1.0 and c["within_scale"] == SINGLE_RUN_SCALE
    se = math.sqrt(0.01 / 5)  # the wider of the normal and the Hartung-Knapp interval (Q / df 0.625, t on 4)
    assert c["tau2"] == 0 and c["z"] == pytest.approx(-0.4)
    hk = stats.t.ppf(0.975, 4) * math.sqrt(2.5 / 4) * se
    assert c["hi"] - c["z"] == pytest.approx(max(stats.norm.ppf(0.975) * se, hk)) and hk > stats.norm.ppf(0.975) * se
    # its p-value is the same rule's (the mean's sign, the "on average" rung)
    assert c["p"] == pytest.approx(max(2 * stats.t.sf(0.4 / (math.sqrt(2.5 / 4) * se), 4), 2 * stats.norm.sf(0.4 / se)))
    # the prediction interval is the Bayesian predictive's and p_generalises the tolerance bounds'
    # (tests/analysis/test_predictive.py), these on the V_m scaled by the per-run procedure's measured
    # conservatism (one run per model): symmetric about the common value, wider than the fixed-effect
    # one (the spread is not known to be 0)
    p, t = predictive(zm, Vm, 0.95), tolerance(zm, SINGLE_RUN_SCALE * Vm, 0.95)
    assert (c["pi_lo"], c["pi_hi"]) == (p["pi_lo"], p["pi_hi"])
    assert c["p_generalises"] == pytest.approx(t["p_generalises"], rel=1e-12)
    assert (c["tol_lo"], c["tol_hi"]) == pytest.approx((t["tol_lo"], t["tol_hi"]), rel=1e-12)
    assert c["tol_lo"] + c["tol_hi"] == pytest.approx(-0.8)
    assert c["pi_lo"] + c["pi_hi"] == pytest.approx(-0.8, abs=1e-7)
    assert c["pi_hi"] - c["pi_lo"] > 2 * stats.norm.ppf(0.975) * se
    # models that differ: the prediction interval carries their spread
    spread = consensus(np.array([-0.9, -0.4, 0.1, -0.2, -0.6]), np.full(5, 0.01))
    assert spread["tau2"] > 0.05
    assert spread["pi_hi"] - spread["pi_lo"] > 2 * stats.norm.ppf(0.975) * math.sqrt(spread["tau2"])
    # two models: a mean and its interval, no prediction interval
    two = consensus(np.array([0.2, 0.3]), np.full(2, 0.01))
    assert math.isfinite(two["lo"]) and math.isnan(two["pi_lo"]) and math.isnan(two["p_generalises"])


def test_models_closer_than_their_variances_allow_get_them_scaled_down():
    # Q 0.25 on 4 df (lower-tail p 0.007): the within variances are too large for these models, so
    # the interval and bounds read them scaled by Q / 4 (for the bounds: the per-run scale 0.72 times
    # the Q / 4 of the variances so scaled, the same); read as they are, the spread would be noise
    zm, Vm = np.array([-0.45, -0.4, -0.35, -0.4, -0.4]), np.full(5, 0.02)
    q = ((zm - zm.mean()) ** 2).sum() / 0.02
    assert stats.chi2.cdf(q, 4) < 0.025
    c = consensus(zm, Vm)
    assert c["within_scale"] == pytest.approx(q / 4)
    assert c["pi_scale"] == pytest.approx(q / 4)
    p, t = predictive(zm, q / 4 * Vm), tolerance(zm, q / 4 * Vm)
    assert (c["pi_lo"], c["pi_hi"], c["tol_hi"]) == pytest.approx((p["pi_lo"], p["pi_hi"], t["tol_hi"]), abs=1e-8)
    assert c["tol_hi"] > tolerance(zm, Vm)["tol_hi"]  # the bound is further from the models' mean
    row = _verdict(_runs({f"m{i}": [math.tanh(z)] for i, z in enumerate(zm)}, se=math.sqrt(0.02)))
    assert row["within_scale"] == pytest.approx(q / 4, rel=1e-6) and "agree more closely" in row["note"]


def test_tau2_upper_bound_is_the_q_profile_one():
    z, v = np.array([0.0, 0.3, -0.2, 0.5, 0.1]), np.full(5, 0.02)
    hi = tau2_upper(z, v, 0.95)
    w = 1 / (v + hi)
    q = (w * (z - (w * z).sum() / w.sum()) ** 2).sum()
    assert q == pytest.approx(stats.chi2.ppf(0.025, 4), rel=1e-6)
    assert tau2_upper(np.zeros(5), v) == 0.0


def test_simes_and_the_reversal_test():
    assert simes(np.array([0.01, 0.04, 0.5])) == pytest.approx(min(3 * 0.01, 3 * 0.04 / 2, 0.5))
    # two strongly positive and two strongly negative models: both sides small, the larger is p
    zm = np.array([0.6, 0.7, -0.5, -0.6])
    pm = np.array([0.001, 0.002, 0.004, 0.001])
    p, a, b = reversal_p(zm, pm)
    pos = simes(np.where(zm > 0, pm / 2, 1 - pm / 2))
    neg = simes(np.where(zm < 0, pm / 2, 1 - pm / 2))
    assert p == pytest.approx(max(pos, neg)) and zm[a] > 0 and zm[b] < 0


# ---- one constructed case per rung of the ladder ------------------------------------------------
def test_the_sign_in_nearly_every_model_negative_and_positive():
    same = {f"m{i}": [-0.5 + 0.02 * i, -0.48 - 0.01 * i] for i in range(6)}
    row = _verdict(_runs(same))
    assert row["verdict"] == "negative in nearly every model"
    assert (row["direction"], row["spread"]) == ("negative in nearly every model", "")
    assert row["pi_high_consensus"] < 0 and row["r_consensus"] == pytest.approx(-0.5, abs=0.05)
    assert row["p_generalises_adj"] < 0.05 and row["n_models_consensus"] == 6
    # with confidence 0.95, nearly all models of this kind are negative
    assert row["share_sign_low"] > 0.999 and row["tol_high_consensus"] < 0
    # 2 runs each: the runs' own scatter sets the within variance (6 degrees of freedom)
    assert row["within_df"] == 6
    reason, way = _why(row)
    assert reason.startswith(f"{answer.SETTLED_FURTHER}: across 6 models the tolerance bounds [")
    assert f"{row['tol_high_consensus']:+.2f}] exclude 0" in reason
    assert way == answer.SETTLED
    mirrored = {m: [-r for r in rs] for m, rs in same.items()}
    assert _verdict(_runs(mirrored))["verdict"] == "positive in nearly every model"


def test_the_sign_on_average_when_the_models_spread():
    # five models, every one negative but spread (-0.1 to -0.7): the mean is clearly negative, a
    # further model's sign is not shown to be shared by nearly all
    rs = [-0.1, -0.25, -0.4, -0.55, -0.7]
    row = _verdict(_runs({f"m{i}": [r] for i, r in enumerate(rs)}, se=0.08))
    assert row["verdict"] == "negative on average, models differ"
    assert row["p_mean_adj"] < 0.05 and row["ci_high_consensus"] < 0 and row["p_generalises_adj"] >= 0.05
    assert row["direction"] == "negative on average" and row["spread"] == "models differ"
    reason, way = _why(row)
    assert reason.startswith(answer.SETTLED_AVERAGE) and "the models differ beyond their runs' variation" in reason
    assert "a further model may still have the other sign" in reason
    assert way.startswith("read each model's correlation (by_model)") and "more models" in way


def test_sign_reversal():
    row = _verdict(_runs({"a": [0.6, 0.62], "b": [0.58, 0.6], "c": [-0.6, -0.61], "d": [-0.59, -0.6]}))
    assert row["verdict"] == "sign reversal" and row["p_reversal_adj"] < 0.05
    assert row["reversal"].startswith(("a +0.6", "b +0.5"))
    reason, way = _why(row)
    assert reason.startswith(f"{answer.REVERSED}: {row['reversal']}, each significant")
    assert "depends on the model" in way
    # seven negative models and one positive: a reversal, and negative on average
    spec = {"a": [0.3, 0.31], **{f"m{i}": [-0.6 + 0.01 * i, -0.61] for i in range(7)}}
    lean = _verdict(_runs(spec, se=0.05))
    assert lean["verdict"] == "sign reversal, negative on average" and lean["spread"] == "sign reversal"


def test_models_differ_without_a_sign():
    # ten models on both sides of 0, each too noisy to show its own sign: together they differ by more
    # than their noise, and neither the mean's sign nor a reversal is shown
    table = _runs({f"m{i}": [0.25 * (-1) ** i, 0.24 * (-1) ** i] for i in range(10)}, se=0.2)
    row = _verdict(table)
    assert row["verdict"] == "models differ" and row["p_heterogeneity_adj"] < 0.05
    assert row["p_mean_adj"] >= 0.05 and row["p_reversal_adj"] >= 0.05 and row["reversal"] == ""
    reason, _ = _why(row)
    assert reason.startswith(f"{answer.DIFFER}: the models differ")
    assert "across 10 models, with no shared sign" in reason


def test_agree_near_zero():
    table = _runs({f"m{i}": [0.01 * (i - 4), -0.01 * (i - 4)] for i in range(8)}, se=0.05)
    row = _verdict(table)
    assert row["verdict"] == "agree near zero"
    assert -0.3 < row["pi_low_consensus"] < row["pi_high_consensus"] < 0.3
    reason, way = _why(row)
    assert reason.startswith(f"{answer.NEAR}: across 8 models") and way == answer.SETTLED
    # the same models but a narrower band: not shown to be near zero
    assert _verdict(table, near_zero=0.02)["verdict"] == "unresolved"


def test_unresolved_and_two_models():
    # three noisy models near zero: no difference, but neither a sign nor a near-zero value shown
    row = _verdict(_runs({"a": [0.1], "b": [-0.05], "c": [0.15]}, se=0.3))
    assert row["verdict"] == "unresolved" and (row["direction"], row["spread"]) == ("", "")
    reason, way = _why(row)
    ci = f"[{row['ci_low_consensus']:+.2f}, {row['ci_high_consensus']:+.2f}]"
    assert reason.startswith(f"{answer.SPANS_ZERO}: across 3 models the consensus interval {ci} includes 0")
    assert "more runs or checkpoints" in way and "more models" in way
    # two models, both clearly negative: the mean's sign, but nothing of a further model from two
    two = _verdict(_runs({"a": [-0.6, -0.62], "b": [-0.61, -0.6]}))
    assert two["verdict"] == "negative on average" and math.isnan(two["pi_low_consensus"])
    assert math.isnan(two["p_generalises"]) and math.isnan(two["share_sign_low"])
    assert "2 models" in two["note"] and two["ci_high_consensus"] < 0
    reason, way = _why(two)
    assert reason.startswith(answer.SETTLED_AVERAGE)
    assert "2 models: a statement about a further model needs 3" in reason and way.startswith("a third model")


def test_fewer_than_two_models_and_no_data():
    left = _verdict(_runs({"a": [0.5, 0.6], "b": [np.nan]}))
    assert left["verdict"] == "fewer than 2 models tested"
    # b has no value at all: one model tested with a value, so no consensus
    assert _why(left)[0].startswith((answer.ONE_MODEL, answer.NO_INTERVAL))
    none = _verdict(_runs({"a": [np.nan], "b": [np.nan]}))
    assert none["verdict"] == "no data"
    reason, way = _why(none)
    assert reason.startswith(answer.NO_VALUE) and "longer series" in way


def test_the_corrections_run_across_the_pairs_of_a_table():
    pairs = [("a", "b"), ("a", "c"), ("b", "c")]
    tables = [
        _runs({f"m{i}": [-0.5, -0.45] for i in range(5)}, pair=pairs[0]),
        _runs({f"m{i}": [-0.2, -0.1] for i in range(5)}, pair=pairs[1], se=0.2),
        _runs({f"m{i}": [0.3, 0.25] for i in range(5)}, pair=pairs[2], se=0.15),
    ]
    a = agreement(pd.concat(tables, ignore_index=True), 0.05, "holm")
    assert (a["family_size"] == 3).all()
    assert np.allclose(a["p_generalises_adj"], holm(a["p_generalises"].to_numpy()))
    assert np.allclose(a["p_mean_adj"], holm(a["p_mean"].to_numpy()))
    fdr = agreement(pd.concat(tables, ignore_index=True), 0.05, "bh")
    assert np.allclose(fdr["p_mean_adj"], bh(fdr["p_mean"].to_numpy())) and (fdr["correction"] == "bh").all()
    none = agreement(pd.concat(tables, ignore_index=True), 0.05, "none")
    assert np.allclose(none["p_generalises_adj"], none["p_generalises"])


def test_a_table_of_pooled_rows_alone_reads_each_model_as_one_run():
    table = _runs({f"m{i}": [-0.5 + 0.01 * i] for i in range(5)})
    full = agreement(table, 0.05, "holm")
    pooled = table[table["run"] == "pooled"].assign(se_z=0.1, p=table.loc[table["run"] != "pooled", "p"].to_numpy())
    alone = agreement(pooled, 0.05, "holm")
    cols = ["verdict", "r_consensus", "pi_low_consensus", "p_reversal", "p_heterogeneity"]
    pd.testing.assert_frame_equal(full[cols], alone[cols])


# ---- the simulated studies the calibration uses ---------------------------------------------
def test_a_simulated_study_has_the_partial_correlation_it_was_given():
    from oodcorr.analysis import Options, partial_corr
    from oodcorr.analysis.simulate.runs import scenario, study_table

    rng = np.random.default_rng(5)
    table = study_table(rng, [0.6, -0.4], 1, 3000, 0.5, n_ood=3)
    assert set(table.columns) == {"model", "in_domain", "run", "unit", "testset", "score"}
    assert len(table) == 2 * 3000 * 4 and set(table["testset"]) == {"in-domain", "ood0", "ood1", "ood2"}
    opts = Options(methods=("pearson",), residualisers=("linear",), step0_check=False, example_boot=0)
    for model, rho in (("m0", 0.6), ("m1", -0.4)):  # the first 1000 units: a run of 3000 takes seconds
        rows = partial_corr(table[(table["model"] == model) & (table["unit"] < 1000)], opts, ordered=False)
        assert {(c["x"], c["y"]) for c in rows} == {("ood0", "ood1"), ("ood0", "ood2"), ("ood1", "ood2")}
        assert [c["r"] for c in rows] == pytest.approx([rho] * 3, abs=0.05)
    assert scenario("half", 5, 0.6) == [0.6, 0.6, -0.6, -0.6, -0.6]
    assert scenario("spread", 3, 0.5) == pytest.approx([math.tanh(-0.5), 0.0, math.tanh(0.5)])
    with pytest.raises(ValueError, match="unknown scenario"):
        scenario("sideways", 3)


def test_verdict_rates_are_reproducible_and_find_the_shared_sign():
    from oodcorr.analysis.simulate.runs import scenario, verdict_rates

    a = verdict_rates(scenario("same", 6, -0.8), 2, 21, 0.3, 6, seed=3)
    b = verdict_rates(scenario("same", 6, -0.8), 2, 21, 0.3, 6, seed=3)
    assert a == b and a["reps"] == 6
    assert sum(v for k, v in a["verdicts"].items() if k.startswith("negative")) == 1.0
    assert a["verdicts"].get("negative in nearly every model", 0) >= 4 / 6  # 5 of 6 with this seed
    null = verdict_rates(scenario("null", 6), 2, 21, 0.3, 6, seed=3)
    assert not any("nearly every" in v for v in null["verdicts"])


def test_a_residual_that_wanders_gets_the_cap_note():
    from oodcorr.analysis import Options, analyse
    from oodcorr.analysis.simulate.runs import study_table

    table = study_table(np.random.default_rng(2), [0.0, 0.0], 2, 25, 0.5, series="drift", drift=3.0)
    pc = analyse(table, Options(pool_by=()))
    runs = pc[pc["run"] != "pooled"]
    capped = runs[(runs["phi_x"] >= 0.99) | (runs["phi_y"] >= 0.99)]
    assert len(capped) >= 1
    assert capped["note"].str.contains("reached its cap 0.99").all()
    assert capped["note"].str.contains("nonstationary").all()
    free = runs[(runs["phi_x"] < 0.99) & (runs["phi_y"] < 0.99)]
    assert not free["note"].fillna("").str.contains("cap").any()
    pooled = pc[(pc["run"] == "pooled") & pc["model"].isin(capped["model"])]
    assert pooled["note"].str.contains("runs: an AR\\(1\\) estimate of their residuals at its cap").any()


# ---- the figures -------------------------------------------------------------------------------
def test_grid_shape_is_near_square():
    from oodcorr.jobs.figures.common import grid_shape

    assert [grid_shape(n) for n in (1, 2, 3, 4, 5, 16, 17)] == [(1, 1), (1, 2), (2, 2), (2, 2), (2, 3), (4, 4), (4, 5)]


def test_the_grid_of_sixteen_models_is_no_wider_than_three_times_its_height(tmp_path):
    from PIL import Image

    from oodcorr.jobs.figures.pair_heatmaps import heatmap_grid

    rows = []
    for m in range(16):
        for x, y in (("a", "b"), ("a", "c"), ("b", "c")):
            rows.append({**_row(f"model-{m}", "pooled", (x, y), 0.1 * (m % 5) - 0.2, 0.1, 0.5), "n_runs": 1})
    pc = pd.DataFrame(rows).assign(conclusion="unresolved", depends_on_form=None, correction="holm", p_adj=0.5)
    drawn = heatmap_grid(pc, str(tmp_path / "grid.png"), "pearson", "linear")
    assert len(drawn) == 16 and all(v == 3 for v in drawn.values())
    w, h = Image.open(tmp_path / "grid.png").size
    assert w <= 3 * h and h <= 3 * w


def test_the_consensus_heatmap_marks_each_verdict(tmp_path):
    from oodcorr.jobs.figures.across_models import consensus_heatmap

    tables = [
        _runs({f"m{i}": [-0.5, -0.48 - 0.01 * i] for i in range(6)}, pair=("a", "b")),  # nearly every model
        _runs(
            {
                "m0": [0.6, 0.6],
                "m1": [0.6, 0.62],
                "m2": [0.61, 0.6],
                "m3": [-0.6] * 2,
                "m4": [-0.6] * 2,
                "m5": [-0.6] * 2,
            },
            pair=("a", "c"),
        ),
        _runs({f"m{i}": [0.1 * (i % 2), -0.05] for i in range(6)}, pair=("b", "c"), se=0.4),  # unresolved
    ]
    agree = agreement(pd.concat(tables, ignore_index=True), 0.05, "holm")
    cells = consensus_heatmap(agree, str(tmp_path / "c.png"), "pearson", "linear", "d", alpha=0.05, near_zero=0.3)
    by_pair = {(r, c): v for (_, r, c), v in cells.items()}
    assert by_pair[("b", "a")].endswith("(negative in nearly every model)") and by_pair[("b", "a")].startswith("-0.")
    assert "±" in by_pair[("c", "a")] and by_pair[("c", "a")].endswith("(sign reversal)")
    assert by_pair[("c", "b")].endswith("(unresolved)") and "±" not in by_pair[("c", "b")]
    assert (tmp_path / "c.png").stat().st_size > 10_000


def test_the_workflow_and_the_command_line_give_the_same_agreement_table(tmp_path):
    """The rule's path (the scores table, from_scores, analyse, agreement) and `oodcorr analyse` on
    the same scores written as CSV: the same consensus and verdicts."""
    from oodcorr.analysis import Options, analyse
    from oodcorr.analysis.readers.workflow_scores import from_scores
    from oodcorr.analysis.simulate.runs import scenario, study_table
    from oodcorr.cli import main

    table = study_table(np.random.default_rng(4), scenario("same", 4, 0.5), 2, 15, 0.4, n_ood=3)
    scores = table.rename(columns={"run": "run_id", "unit": "step", "score": "accuracy"})
    scores["accuracy"] = 0.5 + 0.2 * scores["accuracy"]  # the simulated latent scores as shares (r unchanged)
    scores["role"] = np.where(scores["testset"] == "in-domain", "in-domain", "ood")
    scores["n_train"], scores["seed"] = 64, scores["run_id"].str[-1].astype(int)
    opts = Options(n_boot=200, n_perm=200, example_boot=0)
    long, info = from_scores(scores)
    pc = analyse(long, opts, ordered=True, run_info=info)
    workflow = agreement(pc, opts.alpha, opts.agreement_correction, opts.level, opts.near_zero)
    scores.to_csv(tmp_path / "scores.csv", index=False)
    rc = main(
        ["analyse", str(tmp_path / "scores.csv"), "--in-domain", "in-domain", "--n-boot", "200", "--n-perm", "200",
         "--example-boot", "0", "--out", str(tmp_path / "cli"), "--no-plots", "-q"]
    )  # fmt: skip
    assert rc == 0
    cli = pd.read_csv(tmp_path / "cli/agreement.csv", keep_default_na=False, na_values=[""])
    assert len(cli) == len(workflow) == 3 and list(cli.columns) == list(workflow.columns)
    assert list(cli["verdict"]) == list(workflow["verdict"])
    for c in ("r_consensus", "pi_low_consensus", "pi_high_consensus", "p_generalises_adj", "p_reversal_adj"):
        np.testing.assert_allclose(cli[c].to_numpy(float), workflow[c].to_numpy(float), rtol=1e-9, err_msg=c)
