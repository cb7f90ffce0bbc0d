"""Pooling runs (a random-effects meta-analysis) and the test of the paper's claim across models."""

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from oodcorr.analysis import Options, agreement, analyse
from oodcorr.analysis.across.pooling import combine, fisher_mean, pool_runs, solve_tau2
from oodcorr.analysis.simulate.runs import ar1_series

from helpers import score_row


def _run_table(specs, n=21, phi=0.3, seed=0, testsets=("a", "b")):
    """specs: {model: [rho per run]} -> a canonical long table; pair (a, b) has partial correlation rho."""
    rng = np.random.default_rng(seed)
    rows = []
    for model, rhos in specs.items():
        for i, rho in enumerate(rhos):
            x, y, z = ar1_series(rng, n, phi, rho)
            for step in range(n):
                for ts, v in (("id", z), ("a", x), ("b", y)):
                    rows.append(score_row(model, f"{model}/{i}", step, ts, v[step]))
    return pd.DataFrame(rows)


def test_fisher_mean():
    assert fisher_mean([0.5, np.nan]) == pytest.approx(0.5)
    assert math.isnan(fisher_mean([np.nan]))
    assert fisher_mean([0.2, 0.6]) == pytest.approx(np.tanh((np.arctanh(0.2) + np.arctanh(0.6)) / 2))


def test_random_effects_combination_by_hand():
    z = np.array([0.10, 0.55, 0.30, 0.95])
    v = np.array([0.04, 0.09, 0.05, 0.06])
    got = combine(z, v, 0.95)
    t2 = got["tau2"]
    w = 1 / (v + t2)
    m = (w * z).sum() / w.sum()
    # Paule-Mandel: the generalised Q equals k - 1 at tau^2
    assert t2 > 0 and (w * (z - m) ** 2).sum() == pytest.approx(3, abs=1e-8)
    assert got["z"] == pytest.approx(m)
    q_hk = (w * (z - m) ** 2).sum() / 3
    half = stats.t.ppf(0.975, 3) * math.sqrt(q_hk / w.sum())  # Hartung-Knapp on k - 1 = 3 df
    assert half > 1.96 / math.sqrt(w.sum())
    assert (got["lo"], got["hi"]) == pytest.approx((m - half, m + half))
    assert got["p"] == pytest.approx(2 * stats.t.sf(abs(m) / math.sqrt(q_hk / w.sum()), 3))
    fe = (z / v).sum() / (1 / v).sum()
    q = ((z - fe) ** 2 / v).sum()
    assert got["q"] == pytest.approx(q) and got["i2"] == pytest.approx((q - 3) / q)


def test_the_batched_meta_analysis_equals_statsmodels_combine_effects():
    """random_effects_batch against statsmodels' combine_effects on sets of 3 to 12 estimates
    (some heterogeneous, some not): Paule-Mandel tau^2, the random-effects mean, Cochran's Q and
    I^2 (ours truncated at 0), and the Hartung-Knapp(-Sidik-Jonkman) standard error. The interval's
    floor at the normal random-effects interval, and the p-value of the same rule, are ours
    (statsmodels gives both intervals; we report the wider): checked here against its two."""
    from statsmodels.stats.meta_analysis import combine_effects

    from oodcorr.analysis.across.pooling import random_effects_batch

    rng = np.random.default_rng(12)
    sets = 60
    k = rng.integers(3, 13, sets)
    mask = np.arange(12)[None, :] < k[:, None]
    v = rng.uniform(0.005, 0.2, (sets, 12))
    spread = np.where(np.arange(sets) % 3 == 0, 0.0, rng.uniform(0.05, 0.6, sets))  # a third homogeneous
    z = rng.normal(rng.normal(0, 0.5, sets)[:, None], np.sqrt(v + spread[:, None] ** 2))
    got = random_effects_batch(np.where(mask, z, np.nan), v, mask, level=0.95)
    floors = positive = 0
    for i in range(sets):
        e, var = z[i, : k[i]], v[i, : k[i]]
        # statsmodels' Paule-Mandel iteration stops where |Q - (k - 1)| <= 1e-5 (its default; a much
        # smaller atol lets rounding take Q a hair below k - 1 first, which it reads as tau^2 = 0), so
        # its tau^2 is within 1e-5 / |dQ / dtau^2| of the root, and what depends on tau^2 within 1e-5
        sm = combine_effects(e, var, method_re="pm")
        positive += sm.tau2 > 0
        w = 1 / (var + sm.tau2)
        slope = (w * w * (e - (w * e).sum() / w.sum()) ** 2).sum()
        assert abs(got["tau2"][i] - sm.tau2) <= 1e-5 / slope
        assert got["z"][i] == pytest.approx(sm.mean_effect_re, rel=1e-5, abs=1e-8)
        assert got["q"][i] == pytest.approx(sm.q, rel=1e-12)
        assert got["i2"][i] == pytest.approx(max(0.0, sm.i2), rel=1e-12, abs=1e-12)
        hk = stats.t.ppf(0.975, k[i] - 1) * sm.sd_eff_w_re_hksj  # statsmodels' Hartung-Knapp half-width
        normal = stats.norm.ppf(0.975) * sm.sd_eff_w_re  # ... and the normal random-effects one
        half = (got["hi"][i] - got["lo"][i]) / 2
        assert half == pytest.approx(max(hk, normal), rel=1e-5)
        floors += normal > hk
        p_hk = 2 * stats.t.sf(abs(sm.mean_effect_re) / sm.sd_eff_w_re_hksj, k[i] - 1)
        p_normal = 2 * stats.norm.sf(abs(sm.mean_effect_re) / sm.sd_eff_w_re)
        assert got["p"][i] == pytest.approx(max(p_hk, p_normal), rel=1e-4)
    assert 0 < floors < sets and 0 < positive < sets  # both sides of the floor, and of tau^2 = 0, were checked


def test_runs_that_agree_by_chance_cannot_shrink_the_interval():
    # three runs with the same z: the Hartung-Knapp variance is 0, so the interval falls back
    # to the normal random-effects one (here the fixed-effect one, tau^2 = 0), never narrower
    got = combine([0.3, 0.3, 0.3], [0.05, 0.05, 0.05], 0.95)
    se = math.sqrt(0.05 / 3)
    assert got["tau2"] == 0 and (got["lo"], got["hi"]) == pytest.approx((0.3 - 1.96 * se, 0.3 + 1.96 * se), abs=1e-3)
    assert got["p"] == pytest.approx(2 * stats.norm.sf(0.3 / se))
    # two runs far apart with tiny within variances: Paule-Mandel puts the spread between them
    assert solve_tau2(np.array([[[0.1, 0.5]]]), np.full((1, 1, 2), 0.001), np.ones((1, 1, 2), bool), 1)[0] > 0.05


def test_two_near_identical_runs_do_not_produce_a_significant_pooled_cell():
    # a null pair whose two runs are copies up to 1e-4 noise: r = -0.30 in both. The earlier
    # t-test across the runs' z values (1 degree of freedom) called this significant.
    base = None
    for seed in range(200):
        long = _run_table({"m": [0.0]}, seed=seed)
        r = analyse(long, Options(example_boot=0, pool_by=()))
        if -0.33 < r.loc[r.run == "m/0", "r"].iloc[0] < -0.27:
            base = long
            break
    assert base is not None
    twin = base.assign(run="m/1", score=base["score"] + 1e-4 * np.random.default_rng(1).normal(size=len(base)))
    long = pd.concat([base, twin], ignore_index=True)
    out = analyse(long, Options(example_boot=0, pool_by=()))
    runs, pooled = out[out.run != "pooled"], out[out.run == "pooled"].iloc[0]
    assert runs["r"].between(-0.33, -0.27).all() and abs(runs["r"].diff().iloc[1]) < 0.01
    z = np.arctanh(runs["r"].to_numpy())
    assert stats.ttest_1samp(z, 0).pvalue < 0.05  # what the earlier pooling reported
    # default: no pooled test from 2 runs, and the note says so
    assert math.isnan(pooled["p"]) and not pooled["significant"] and pooled["conclusion"] == "unresolved"
    assert pooled["note"].startswith("2 runs: no pooled interval or p-value")
    w = 1 / runs["se_z"].to_numpy() ** 2
    assert pooled["r"] == pytest.approx(math.tanh((w * z).sum() / w.sum()))
    # the fixed-effect option: each run's own uncertainty counts, so still not significant
    fe = analyse(long, Options(example_boot=0, pool_by=(), pool_two_runs="fixed-effect"))
    fe = fe[fe.run == "pooled"].iloc[0]
    se = 1 / math.sqrt(w.sum())
    assert fe["p"] == pytest.approx(2 * stats.norm.sf(abs((w * z).sum() / w.sum()) / se))
    assert fe["p"] > 0.05 and not fe["significant"] and "fixed-effect combination" in fe["note"]


def test_single_run_empty_runs_and_runs_without_information():
    rows = pd.DataFrame(
        {
            "model": ["one", "none", "m", "m", "m", "m"],
            "in_domain": "d",
            "pool_group": "all runs",
            "run": ["o/0", "n/0", "m/0", "m/1", "m/2", "m/3"],
            "x": "a",
            "y": "b",
            "method": "pearson",
            "residualiser": "linear",
            "r": [0.2, np.nan, 0.3, 0.5, 0.4, 0.9],
            "ci_low": [-0.1, np.nan, 0, 0, 0, np.nan],
            "ci_high": [0.5, np.nan, 0.6, 0.7, 0.6, np.nan],
            "p": [0.2, np.nan, 0.1, 0.1, 0.1, np.nan],
            "se_z": [0.2, np.nan, 0.2, 0.25, 0.2, np.nan],
            "n": 9,
            "n_units": 9,
            "p_method": "modified t-test",
            "note": ["", "x is constant", "", "", "", "effective sample size 2.1 of 9 units"],
        }
    )
    pooled = pool_runs(rows).set_index("model")
    one = pooled.loc["one"]  # a single run: its own interval and p-value
    assert (one["r"], one["ci_low"], one["ci_high"], one["p"]) == (0.2, -0.1, 0.5, 0.2)
    assert one["p_method"] == "modified t-test (single run)"
    none = pooled.loc["none"]
    assert math.isnan(none["r"]) and none["note"] == "no run gave a value: x is constant"
    m = pooled.loc["m"]  # the run with no interval is left out of the weights, and counted
    assert m["n_runs"] == 4 and m["n_runs_finite"] == 3
    assert m["note"] == "1 of 4 runs with a value left out: too little effective information for an interval"
    assert m["r"] == pytest.approx(math.tanh(combine(np.arctanh([0.3, 0.5, 0.4]), [0.04, 0.0625, 0.04])["z"]))


def test_runs_are_pooled_within_n_train_by_default():
    long = _run_table({"m": [0.3] * 6}, seed=3)
    info = pd.DataFrame(
        {"run": [f"m/{i}" for i in range(6)], "n_train": [64, 64, 64, 512, 512, 512], "seed": [0, 1, 2, 0, 1, 2]}
    )
    out = analyse(long, Options(example_boot=0), run_info=info)
    pooled = out[out.run == "pooled"].set_index("n_train")
    assert sorted(pooled.index) == [64, 512] and (pooled["n_runs"] == 3).all()
    assert set(pooled["pool_group"]) == {"n_train=64", "n_train=512"} and pooled["seed"].isna().all()
    assert pooled["p_method"].str.startswith("random effects across 3 runs").all()
    runs = out[out.run != "pooled"]
    assert list(runs["seed"]) == [0, 1, 2, 0, 1, 2] and runs["n_train"].dtype == "Int64"
    # pooled within a group = pooled from that group's runs alone
    alone = analyse(long[long.run.isin(["m/0", "m/1", "m/2"])], Options(example_boot=0, pool_by=()))
    assert pooled.loc[64, "r"] == pytest.approx(alone[alone.run == "pooled"]["r"].iloc[0])
    across = analyse(long, Options(example_boot=0, pool_by=()), run_info=info)
    assert (across["run"] == "pooled").sum() == 1 and across.loc[across.run == "pooled", "n_runs"].iloc[0] == 6
    with pytest.raises(ValueError, match="several rows for run"):
        analyse(long, Options(example_boot=0), run_info=pd.concat([info, info.iloc[:1]]))


# ---- agreement across models ---------------------------------------------------------------


def _pooled(model, x, r, p, se, lo=np.nan, hi=np.nan, sig=False):
    return {
        "model": model,
        "in_domain": "d",
        "pool_group": "all runs",
        "x": x,
        "y": "z",
        "method": "pearson",
        "residualiser": "linear",
        "r": r,
        "p": p,
        "se_z": se,
        "ci_low": lo,
        "ci_high": hi,
        "significant": sig,
    }


def test_agreement_tests_by_hand():
    rows = pd.DataFrame(
        [
            _pooled("A", "rev", 0.6, 0.001, 0.15, 0.3, 0.8, True),
            _pooled("B", "rev", -0.55, 0.002, 0.15),
            _pooled("C", "rev", 0.05, 0.8, 0.18),
            _pooled("A", "diff", 0.6, 0.001, 0.15),
            _pooled("B", "diff", 0.05, 0.7, 0.15),
            _pooled("C", "diff", 0.05, 0.8, 0.15),
            _pooled("A", "null", 0.05, 0.8, 0.18),
            _pooled("B", "null", -0.05, 0.8, 0.18),
            _pooled("C", "null", 0.0, 1.0, 0.18),
            _pooled("A", "one", 0.6, 0.001, 0.15),
            _pooled("B", "one", np.nan, np.nan, np.nan),
            _pooled("A", "nodata", np.nan, np.nan, np.nan),
            _pooled("B", "nodata", np.nan, np.nan, np.nan),
        ]
    )
    # a table of pooled rows alone: each model's pooled row is read as its one run
    a = agreement(rows, 0.05, "holm").set_index("x")
    rev = a.loc["rev"]
    # intersection-union test: some model positive and some negative, each side Simes' combination of
    # the models' one-sided p-values (here the smallest decides: 3 p_(1) / 1 on both sides)
    assert rev["p_reversal"] == pytest.approx(max(3 * 0.001 / 2, 3 * 0.002 / 2))
    assert rev["family_size"] == 3 and rev["correction"] == "holm"
    assert rev["p_reversal_adj"] == pytest.approx(3 * rev["p_reversal"])  # the smallest of 3 finite p-values
    assert rev["verdict"] == "sign reversal" and rev["reversal"] == "A +0.60 vs B -0.55"
    z, w = np.arctanh([0.6, -0.55, 0.05]), 1 / np.array([0.15, 0.15, 0.18]) ** 2
    q = (w * (z - (w * z).sum() / w.sum()) ** 2).sum()
    assert rev["q_models"] == pytest.approx(q) and rev["df_models"] == 2
    assert rev["p_heterogeneity"] == pytest.approx(stats.chi2.sf(q, 2))
    assert rev["by_model"].startswith("A: +0.60* [+0.30, +0.80]; B: -0.55; C: +0.05")
    assert a.loc["diff", "verdict"] == "models differ" and a.loc["diff", "reversal"] == ""
    # three models near 0 with wide intervals: no difference, no shared sign, and a further model's
    # value (prediction interval on 1 degree of freedom) not shown to be near zero either
    # one-sided p of "positive": A 0.4, C 0.5 (r = 0), B 0.6; Simes: min(3 * 0.4, 3 * 0.5 / 2, 0.6) = 0.6
    assert a.loc["null", "verdict"] == "unresolved" and a.loc["null", "p_reversal"] == pytest.approx(0.6)
    assert a.loc["one", "verdict"] == "fewer than 2 models tested" and math.isnan(a.loc["one", "p_reversal"])
    assert a.loc["nodata", "verdict"] == "no data"


def test_three_models_with_opposite_true_signs_and_one_null_get_the_right_verdicts():
    # models A (+0.7), B (-0.7) and C (0) on pair (a, b); every model null on (a, c); A and C
    # +0.5 on (b, c), B 0. Five runs of 41 checkpoints each (AR(1) noise, phi = 0.3); Holm
    # across the three pairs.
    rng = np.random.default_rng(12)
    rows = []
    n = 41
    corr = {
        "A": [[1, 0.7, 0], [0.7, 1, 0.5], [0, 0.5, 1]],  # noise correlations of (a, b, c)
        "B": [[1, -0.7, 0], [-0.7, 1, 0], [0, 0, 1]],
        "C": [[1, 0, 0], [0, 1, 0.5], [0, 0.5, 1]],
    }
    for model, C in corr.items():
        L = np.linalg.cholesky(C)
        for i in range(5):
            e = rng.normal(size=(n, 3)) @ L.T
            for t in range(1, n):
                e[t] = 0.3 * e[t - 1] + math.sqrt(1 - 0.09) * e[t]
            t = np.arange(n)
            z = 0.5 + 0.3 * (1 - np.exp(-t / 10)) + 0.02 * rng.normal(size=n)
            for step in range(n):
                for ts, v in (
                    ("id", z[step]),
                    ("a", 0.8 * z[step] + 0.02 * e[step, 0]),
                    ("b", -0.4 * z[step] + 0.02 * e[step, 1]),
                    ("c", 0.3 * z[step] + 0.02 * e[step, 2]),
                ):
                    rows.append(score_row(model, f"{model}/{i}", step, ts, v))
    out = analyse(pd.DataFrame(rows), Options(example_boot=0, pool_by=()))
    pooled = out[out.run == "pooled"]
    ab = pooled[(pooled.x == "a") & (pooled.y == "b")].set_index("model")
    assert ab.loc["A", "conclusion"] == "positive" and ab.loc["B", "conclusion"] == "negative"
    assert ab.loc["C", "conclusion"] in ("unresolved", "near zero")
    a = agreement(out, 0.05, "holm").set_index("x")
    a = a[a.y.isin(["b", "c"])]
    verdicts = {(x, y): v for x, y, v in zip(a.index, a["y"], a["verdict"])}
    assert verdicts[("a", "b")] == "sign reversal", a.loc["a"]
    assert a[(a.index == "a") & (a.y == "b")]["reversal"].iloc[0].startswith("A +0.")
    assert verdicts[("a", "c")] in ("unresolved", "agree near zero")
    assert verdicts[("b", "c")] == "models differ"  # A and C share +0.5, B has none: no reversal
    assert (a["family_size"] == 3).all()
