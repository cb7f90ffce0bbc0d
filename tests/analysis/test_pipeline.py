"""The analysis of whole tables: per-run and pooled rows, degenerate input, the residualiser
and step-0 checks, the example-level bootstrap, reading long/wide tables, and the figures."""

import dataclasses
import logging
import math

import numpy as np
import pandas as pd
import pingouin as pg
import pytest

from oodcorr.analysis import (
    COLUMNS,
    Options,
    agreement,
    analyse,
)
from oodcorr.analysis.readers.tables import Layout, from_long, from_wide, read_table
from oodcorr.analysis.readers.workflow_scores import from_scores
from oodcorr.analysis.simulate.runs import ar1_series
from oodcorr.core.errors import DataError
from oodcorr.jobs.figures.common import TEXT_LIMIT, cluster_order
from oodcorr.jobs.figures.curves import learning_curves, scatter, scatter_fits
from oodcorr.jobs.figures.pair_heatmaps import describe, heatmap, heatmap_grid, heatmap_marks

from helpers import score_row

FAST = Options(residualisers=("linear",), n_boot=300, n_perm=300, example_boot=60, pool_by=())


def _long(rng, n_steps=12, runs=(("m1", 0), ("m1", 1), ("m2", 0)), testsets=("a", "b", "c")):
    rows = []
    for model, seed in runs:
        for step in range(n_steps):
            z = 0.5 + 0.03 * step + rng.normal(0, 0.01)
            for ts, score in [("id", z)] + [(ts, 0.4 * z + rng.normal(0, 0.02)) for ts in testsets]:
                rows.append(score_row(model, f"{model}/s{seed}", step * 10, ts, score))
    return pd.DataFrame(rows)


def _cell(out, run, x, y, method="pearson", residualiser="linear", model=None):
    sel = out[
        (out.run == run)
        & (out.x == x)
        & (out.y == y)
        & (out.method == method)
        & (out.residualiser == residualiser)
        & ((out.model == model) if model else True)
    ]
    assert len(sel) == 1, sel
    return sel.iloc[0]


def test_one_row_per_run_or_pooled_pair_method_residualiser():
    rng = np.random.default_rng(0)
    long = _long(rng)
    opts = Options(methods=("pearson", "spearman"), residualisers=("linear", "gam"), n_boot=200, n_perm=200)
    out = analyse(long, opts)
    assert list(out.columns) == COLUMNS
    assert len(out) == (3 + 2) * 3 * 2 * 2  # (3 runs + 2 pooled) x 3 pairs x 2 methods x 2 residualisers
    assert set(zip(out.x, out.y)) == {("a", "b"), ("a", "c"), ("b", "c")}
    one = long[long.run == "m1/s1"].pivot(index="unit", columns="testset", values="score")
    row = _cell(out, "m1/s1", "a", "c")
    assert row["r"] == pytest.approx(pg.partial_corr(one, x="a", y="c", covar="id")["r"].iloc[0], abs=1e-10)
    assert row["ci_low"] <= row["r"] <= row["ci_high"] and row["n"] == 12 and 2 < row["n_eff"] <= 11
    assert row["p_method"] == "modified t-test (AR(1) effective n)" and math.isnan(row["block_length"])
    assert row["conclusion"] in ("positive", "negative", "unresolved", "near zero") and row["pool_group"] == "all runs"
    pooled = _cell(out, "pooled", "a", "c", model="m1")
    runs = [_cell(out, r, "a", "c") for r in ("m1/s0", "m1/s1")]
    z = np.arctanh([r["r"] for r in runs])
    w = 1 / np.array([r["se_z"] for r in runs]) ** 2
    assert pooled["model"] == "m1" and pooled["n_runs"] == 2 and pooled["n_runs_finite"] == 2
    assert pooled["r"] == pytest.approx(np.tanh((w * z).sum() / w.sum()))  # inverse-variance weights
    assert math.isnan(pooled["p"]) and "2 runs" in pooled["note"]  # no pooled test from two runs
    single = _cell(out, "pooled", "a", "c", model="m2")  # one run: the run's own row
    assert (single["r"], single["ci_low"], single["p"]) == tuple(_cell(out, "m2/s0", "a", "c")[["r", "ci_low", "p"]])
    # p_adj: Holm within each (model, run, method, residualiser) family of 3 pairs
    fam = out[(out.run == "m1/s0") & (out.method == "pearson") & (out.residualiser == "linear")]
    p = np.sort(fam["p"].to_numpy())
    assert fam["p_adj"].min() == pytest.approx(min(1.0, 3 * p[0]))
    assert (out["significant"] == (out["p_adj"] < 0.05)).all()


def test_cells_do_not_change_when_a_testset_or_run_is_added():
    rng = np.random.default_rng(1)
    long = _long(rng, testsets=("a", "b", "c", "d"))
    small = long[(long.testset != "d") & (long.run != "m2/s0")]
    for opts in (
        FAST,
        Options(residualisers=("linear",), inference="block", n_boot=300, n_perm=300, example_boot=0, pool_by=()),
    ):
        full, part = analyse(long, opts), analyse(small, opts)
        a, b = _cell(full, "m1/s0", "a", "b"), _cell(part, "m1/s0", "a", "b")
        for col in ("r", "ci_low", "ci_high", "p", "p_perm", "n_eff", "se_z", "r_no_step0", "ci_low_no_step0"):
            assert a[col] == b[col] or (math.isnan(a[col]) and math.isnan(b[col])), col


def test_every_degenerate_case_is_nan_with_a_reason_and_never_a_crash(caplog):
    rng = np.random.default_rng(2)
    long = _long(rng, n_steps=10, runs=(("m", 0),), testsets=("a", "b", "const", "gappy", "dup", "nan"))
    long.loc[long.testset == "const", "score"] = 0.5
    long = long[~((long.testset == "gappy") & (long.unit > 20))]  # evaluated at 3 of 10 steps only
    long.loc[(long.testset == "nan") & (long.unit.isin([0, 10, 20])), "score"] = np.nan
    long = pd.concat([long, long[(long.testset == "dup") & (long.unit == 30)]])
    opts = Options(residualisers=("linear", "gam", "gam+step"), n_boot=100, n_perm=100)
    with caplog.at_level(logging.WARNING):
        out = analyse(long, opts)
    assert "duplicate units" in caplog.text
    run = out[out.run == "m/s0"]

    def note(x, y, res="linear"):
        row = _cell(run, "m/s0", x, y, residualiser=res)
        assert math.isnan(row["r"]) and math.isnan(row["p"]) and math.isnan(row["ci_low"]), row
        return row["note"]

    assert note("a", "const") == "const is constant across the 10 points"
    assert (
        note("a", "gappy")
        == "only 3 complete points of 10 (the others have a missing value); the linear residualiser needs at least 4"
    )
    assert note("a", "dup") == "duplicate units for dup: [30]"
    # missing values: 7 complete points are enough for OLS but too few for the GAM
    assert math.isfinite(_cell(run, "m/s0", "a", "nan")["r"]) and _cell(run, "m/s0", "a", "nan")["n"] == 7
    assert "the gam residualiser needs at least 8" in note("a", "nan", "gam")
    assert math.isfinite(_cell(run, "m/s0", "a", "b", residualiser="gam")["r"])
    # pooled rows carry the reason on
    assert "const is constant" in _cell(out, "pooled", "a", "const")["note"]

    # the in-domain testset duplicated, or missing, or constant: every cell says so
    z_dup = pd.concat([long, long[(long.testset == "id") & (long.unit == 0)]])
    assert analyse(z_dup, opts)["note"].str.contains("duplicate units for the in-domain testset id").all()
    no_z = long.assign(in_domain="mnli")
    assert analyse(no_z, opts)["note"].str.contains("'mnli' has no scores").all()
    z_const = long.copy()
    z_const.loc[z_const.testset == "id", "score"] = 0.7
    notes = analyse(z_const, opts).query("run != 'pooled' and x == 'a' and y == 'b'")["note"]
    assert notes.str.contains("covariate (in-domain score) is constant", regex=False).all()
    # '+step' needs ordered units
    words = long.assign(unit="u" + long["unit"].astype(str))
    row = _cell(analyse(words, opts), "m/s0", "a", "b", residualiser="gam+step")
    assert "needs a numeric unit column" in row["note"]
    spline = analyse(words, dataclasses.replace(opts, residualisers=("spline", "spline+step")))
    row = _cell(spline, "m/s0", "a", "b", residualiser="spline+step")
    assert "needs a numeric unit column" in row["note"] and math.isnan(row["r"])
    assert math.isfinite(_cell(spline, "m/s0", "a", "b", residualiser="spline")["r"])


def test_example_level_bootstrap_widens_with_fewer_examples():
    rng = np.random.default_rng(5)
    n_steps = 15
    x, y, z = ar1_series(rng, n_steps, 0.3, 0.5, noise=0.05)
    y = y + 0.8  # into (0, 1): y = -0.4 z + noise

    def tables(n_ex):
        rows, ex = [], []
        for ts, acc in (("id", z), ("a", x), ("b", y)):
            acc = np.clip(acc, 0.05, 0.95)
            for step, p in enumerate(acc):
                correct = (rng.uniform(size=n_ex) < p).astype(float)
                rows.append(
                    {"model": "m", "in_domain": "id", "run": "r", "unit": step, "testset": ts, "score": correct.mean()}
                )
                ex.append(
                    pd.DataFrame(
                        {
                            "model": "m",
                            "run": "r",
                            "unit": step,
                            "testset": ts,
                            "example": np.arange(n_ex),
                            "correct": correct,
                        }
                    )
                )
        return pd.DataFrame(rows), pd.concat(ex, ignore_index=True)

    widths = {}
    for n_ex in (40, 4000):
        long, ex = tables(n_ex)
        row = _cell(analyse(long, FAST, ex), "r", "a", "b")
        assert row["ex_note"] == "" and row["ex_ci_low"] <= row["r"] <= row["ex_ci_high"]
        widths[n_ex] = row["ex_ci_high"] - row["ex_ci_low"]
    # a 40-example testset is noisy: its scores' correlation is much less certain
    assert widths[40] > 2 * widths[4000], widths
    # predictions missing at one checkpoint: no example interval, and the reason
    long, ex = tables(100)
    row = _cell(analyse(long, FAST, ex[~((ex.testset == "b") & (ex.unit == 3))]), "r", "a", "b")
    assert math.isnan(row["ex_ci_low"]) and "no per-example predictions for b at unit(s) [3]" in row["ex_note"]
    assert math.isfinite(row["r"])  # the score-level analysis is unaffected


def test_exchangeable_units_use_the_ordinary_t_test():
    rng = np.random.default_rng(6)
    long = _long(rng, runs=(("m", 0),))
    long["unit"] = "seed-" + long["unit"].astype(str)
    row = _cell(analyse(long, FAST), "m/s0", "a", "b")
    assert row["p_method"] == "t-test (exchangeable units)" and row["n_eff"] == pytest.approx(11)
    assert row["p"] == pytest.approx(row["p_param"], rel=1e-10) and math.isnan(row["phi_x"])
    assert math.isnan(row["r_no_step0"])  # no step 0 among labels
    block = _cell(
        analyse(long, Options(residualisers=("linear",), inference="block", n_boot=300, example_boot=0, pool_by=())),
        "m/s0",
        "a",
        "b",
    )
    assert block["block_length"] == 1 and block["p_method"] == "t-test" and block["p"] == pytest.approx(row["p"])


# ---- reading tables --------------------------------------------------------------------------


WIDE = (
    "\ufeffRun,ID acc,A,B,C,notes\nRun 0,0.80,0.5,0.6,0.1,x\nRun 1,0.82,0.4,0.7,0.2,y\n"
    "Run 2,0.81,0.45,0.65,0.3,\nRun 3,0.83,0.41,0.69,0.35,\nRun 4,0.84,0.43,0.62,0.2,\n"
    "Mean,0.82,0.44,0.65,0.23,\nStandard deviation:,0.01,0.03,0.04,0.1,\n"
    "min (all runs),0.8,0.4,0.6,0.1,\n,,,,,\n,,,,,\n"
)


def test_wide_table_summary_rows_are_excluded_with_a_logged_message(tmp_path, caplog):
    p = tmp_path / "wide.csv"
    p.write_text(WIDE, encoding="utf-8")
    df, where = read_table(p)
    with caplog.at_level(logging.WARNING):
        long = from_wide(df, Layout(unit="Run", in_domain="ID acc", source=str(p), exclude=("notes",)))
    assert sorted(long["unit"].unique()) == [f"Run {i}" for i in range(5)]
    assert set(long["testset"]) == {"ID acc", "A", "B", "C"} and len(long) == 5 * 4
    for line, label in ((7, "'Mean'"), (8, "'Standard deviation:'"), (9, "'min (all runs)'")):
        assert f"line {line}, unit {label}: a summary row" in caplog.text
    assert "excluded 2 empty row(s) (line 10-11)" in caplog.text


def test_wide_table_errors_name_the_line_or_column(tmp_path):
    p = tmp_path / "wide.csv"
    p.write_text(WIDE, encoding="utf-8")
    df, _ = read_table(p)
    with pytest.raises(DataError, match="not numeric: column 'notes' \\(line 2: 'x'\\)"):
        from_wide(df, Layout(unit="Run", in_domain="ID acc", source="t"))
    with pytest.raises(DataError, match="in-domain testset 'MNLI' is not a column"):
        from_wide(df, Layout(unit="Run", in_domain="MNLI", source="t", exclude=("notes",)))
    p.write_text(WIDE.replace("Run 2,", ",", 1), encoding="utf-8")
    df, _ = read_table(p)
    with pytest.raises(DataError, match="line 4 has scores but no value in the unit column 'Run'"):
        from_wide(df, Layout(unit="Run", in_domain="ID acc", source="t", exclude=("notes",)))


def test_long_table_and_workflow_scores_give_the_same_cells():
    rng = np.random.default_rng(8)
    long = _long(rng, runs=(("m", 0),))
    scores = long.rename(columns={"run": "run_id", "unit": "step", "score": "accuracy"})
    scores["role"] = np.where(scores.testset == "id", "in-domain", "ood")
    scores["n_train"], scores["seed"] = 8, 0
    canon, info = from_scores(scores)
    assert info.to_dict("records") == [{"run": "m/s0", "n_train": 8, "seed": 0}]
    via_long = from_long(
        scores, Layout(unit="step", in_domain="id", model="model", run="run_id"), testset="testset", score="accuracy"
    )
    a, b = analyse(canon, FAST), analyse(via_long, FAST)
    pd.testing.assert_frame_equal(a, b)
    two = pd.concat([scores, scores[scores.testset == "a"].assign(testset="a2", role="in-domain")])
    notes = analyse(from_scores(two)[0], FAST)["note"]
    assert notes.str.contains("no unique in-domain testset for this run").all()
    with pytest.raises(DataError, match="'mnli' does not occur in column 'testset'"):
        from_long(scores, Layout(unit="step", in_domain="mnli"), testset="testset", score="accuracy")


# ---- figures ---------------------------------------------------------------------------------


def test_heatmap_lower_triangle_stars_and_hatched_nan(tmp_path):
    rng = np.random.default_rng(9)
    long = _long(rng, testsets=("a", "b", "c"))
    long.loc[(long.model == "m2") & (long.testset == "c"), "score"] = 0.5  # constant -> n/a
    out = analyse(long, FAST)
    out.loc[(out.model == "m1") & (out.run == "pooled") & (out.x == "a") & (out.y == "b"), "significant"] = True
    cells = heatmap(out, "m1", str(tmp_path / "h.png"), "pearson", "linear")
    assert (tmp_path / "h.png").read_bytes()[:4] == b"\x89PNG"
    assert set(cells) == {("id", "b", "a"), ("id", "c", "a"), ("id", "c", "b")}  # strict lower triangle
    r_ab = out[(out.model == "m1") & (out.run == "pooled") & (out.x == "a") & (out.y == "b")]["r"].iloc[0]
    assert cells[("id", "b", "a")] == f"{r_ab:+.2f}*"
    assert not cells[("id", "c", "b")].endswith("*")
    cells2 = heatmap(out, "m2", str(tmp_path / "h2.png"), "pearson", "linear")
    assert cells2[("id", "c", "a")] == "n/a" and cells2[("id", "c", "b")] == "n/a"
    grid = heatmap_grid(out, str(tmp_path / "g.png"), "pearson", "linear")
    assert grid == {("m1", "id"): 3, ("m2", "id"): 3}
    assert heatmap(out.iloc[0:0], "m1", str(tmp_path / "e.png"), "pearson", "linear") == {}
    assert (tmp_path / "e.png").stat().st_size > 1000
    # marks: a dagger where the residualisers disagree in sign
    flagged = out.copy()
    sel = (flagged.model == "m1") & (flagged.run == "pooled") & (flagged.x == "a") & (flagged.y == "c")
    flagged.loc[sel, "depends_on_form"] = True
    cells3 = heatmap(flagged, "m1", str(tmp_path / "h3.png"), "pearson", "linear")
    assert cells3[("id", "c", "a")].endswith("†")


def test_heatmap_titles_say_numbers_not_names():
    rng = np.random.default_rng(9)
    long = _long(rng, runs=(("m1", 0), ("m1", 1), ("m1", 2), ("m2", 0), ("m2", 1)), testsets=("a", "b", "c", "d"))
    out = analyse(long, Options(residualisers=("linear",), example_boot=0, pool_by=()))
    rows = out[(out.model == "m1") & (out.run == "pooled") & (out.method == "pearson")]
    title = describe(rows, alpha=0.05, level=0.95, near_zero=0.3)
    assert "3 runs; *: p_adj < 0.05 (Holm across 6 pairs)" in title
    assert "faded: 95% interval spans 0; boxed: interval within ±0.3" in title
    assert "alpha" not in title and "holm)" not in title
    two = describe(out[(out.model == "m2") & (out.run == "pooled")], alpha=0.05, level=0.95, near_zero=0.3)
    assert two.startswith("2 runs; no p-values (the table's note column says why)")


def test_a_heatmap_of_many_testsets_is_clustered_and_unlabelled(tmp_path):
    rng = np.random.default_rng(10)
    n, k = 25, 36
    t = np.arange(n)
    z = 0.5 + 0.3 * (1 - np.exp(-t / 6)) + 0.005 * rng.normal(size=n)
    shared = rng.normal(size=(n, 2)) * 0.02
    series = {"id": z}
    for j in range(k):  # even testsets follow one hidden factor, odd ones the other
        series[f"t{j:02d}"] = 0.4 * z + shared[:, j % 2] + 0.005 * rng.normal(size=n)
    out = analyse(
        _series_table(series, n), Options(residualisers=("linear",), example_boot=0, pool_by=(), step0_check=False)
    )
    names = sorted(f"t{j:02d}" for j in range(k))
    pooled = out[out.run == "pooled"]
    order = cluster_order(pooled, names)
    assert sorted(order) == names
    groups = [int(name[1:]) % 2 for name in order]
    assert sum(a != b for a, b in zip(groups, groups[1:])) == 1  # the two families sit in two blocks
    cells = heatmap(out, "m", str(tmp_path / "big.png"), "pearson", "linear", alpha=0.05, level=0.95, near_zero=0.3)
    assert k > TEXT_LIMIT and len(cells) == k * (k - 1) // 2
    assert (tmp_path / "big.png").read_bytes()[:4] == b"\x89PNG"


def test_figures_take_marks_and_fits_from_the_analysis_options():
    opts = Options(alpha=0.01, level=0.9, near_zero=0.2, residualisers=("gam+step", "linear", "gam"))
    assert heatmap_marks(opts) == {"alpha": 0.01, "level": 0.9, "near_zero": 0.2}
    assert scatter_fits(opts.residualisers) == ["linear", "gam"]  # '+step' fits need the step: not a curve
    assert scatter_fits(("linear+step",)) == ["linear"]
    assert scatter_fits(("spline",)) == ["spline", "linear"]  # the curve, and the line its check


def test_learning_curves_and_scatter_draw_every_testset_and_fit(tmp_path):
    rng = np.random.default_rng(10)
    long = _long(rng, runs=(("m", 0), ("m", 1)))
    drawn = learning_curves(long, "m", str(tmp_path / "lc.png"))
    assert drawn == {"id": ["a", "b", "c", "id"]}
    fits = scatter(long, "m", str(tmp_path / "sc.png"), residualisers=("linear", "gam"))
    assert fits == {"a": 4, "b": 4, "c": 4}  # 2 runs x (linear + GAM) per testset
    fits = scatter(long, "m", str(tmp_path / "sc3.png"), residualisers=("spline", "linear"))
    assert fits == {"a": 4, "b": 4, "c": 4}  # 2 runs x (spline + its line) per testset
    few = long[long.unit < 50]  # 5 checkpoints: too few for the GAM, the line is still drawn
    assert scatter(few, "m", str(tmp_path / "sc2.png"), residualisers=("linear", "gam")) == {"a": 2, "b": 2, "c": 2}
    words = long.assign(unit="u" + long["unit"].astype(str))
    assert learning_curves(words, "m", str(tmp_path / "lc2.png")) == {}
    for f in ("lc.png", "sc.png", "sc2.png", "lc2.png"):
        assert (tmp_path / f).read_bytes()[:4] == b"\x89PNG"


# ---- checks: residualiser, step 0 ----------------------------------------------------------


def _series_table(series: dict, n: int, run="r", model="m") -> pd.DataFrame:
    return pd.DataFrame(
        [score_row(model, run, step, ts, float(v[step])) for step in range(n) for ts, v in series.items()]
    )


@pytest.mark.parametrize("curve", ["spline", "gam"])
def test_a_curve_the_line_leaves_behind_is_said_as_depending_on_the_form(curve):
    # OOD scores depend on in-domain score in a U shape; their noises correlate +0.3. The line
    # leaves the shared U in both residuals (strongly negative r), the curve removes it: each
    # curve cell carries the line's r and interval beside its own, and says the two conclude
    # differently, with no linear residualiser configured
    rng = np.random.default_rng(2)
    n = 40
    z = np.sort(rng.uniform(0.5, 0.9, n))
    u = 25 * (z - 0.7) ** 2
    e = rng.multivariate_normal([0, 0], [[1, 0.3], [0.3, 1]], size=n) * 0.05
    long = _series_table({"id": z, "a": u + e[:, 0], "b": -u + e[:, 1], "c": z + 0.05 * rng.normal(size=n)}, n)
    both = analyse(long, Options(residualisers=(curve, "linear"), example_boot=0, pool_by=()))
    lin = _cell(both, "r", "a", "b", residualiser="linear")
    out = analyse(long, Options(residualisers=(curve,), example_boot=0, pool_by=()))
    cur = _cell(out, "r", "a", "b", residualiser=curve)
    assert lin["r"] < -0.8 and lin["conclusion"] == "negative" and cur["r"] > 0
    # the check is the line's own cell, to rounding
    for c in ("r", "ci_low", "ci_high", "p"):
        assert cur[f"{c}_line"] == pytest.approx(lin[c], abs=1e-9)
    assert cur["depends_on_form"] is True
    assert cur["form_check"] == (
        f"depends on the form: {curve} {cur['r']:+.2f} [{cur['ci_low']:+.2f}, {cur['ci_high']:+.2f}], "
        f"linear {lin['r']:+.2f} [{lin['ci_low']:+.2f}, {lin['ci_high']:+.2f}]"
    )
    # the U is most of what the line leaves in a and b, and the curve's F test says so; c is straight
    assert cur["curve_r2_x"] > 0.8 and cur["curve_p_x"] < 1e-6 and cur["curve_r2_y"] > 0.8
    straight = _cell(out, "r", "a", "c", residualiser=curve)
    assert straight["curve_r2_y"] < 0.2
    pooled = _cell(out, "pooled", "a", "b", residualiser=curve)
    assert pooled["depends_on_form"] is True  # the pooled rows are compared too
    assert pooled["r_line"] == pytest.approx(lin["r"], abs=1e-9)
    # the line's own rows carry no check
    assert both.loc[both["residualiser"] == "linear", "depends_on_form"].isna().all()
    assert (both.loc[both["residualiser"] == "linear", "form_check"] == "").all()


def test_step0_check_says_when_the_pre_finetuning_checkpoint_decides_the_conclusion():
    # independent noise everywhere but at step 0, where both OOD scores sit far above the line
    rng = np.random.default_rng(4)
    n = 16
    t = np.arange(n)
    z = 0.5 + 0.3 * (1 - np.exp(-t / 4)) + 0.005 * rng.normal(size=n)
    a, b = 0.5 * z + 0.01 * rng.normal(size=n), -0.2 * z + 0.01 * rng.normal(size=n)
    a[0] += 0.08
    b[0] += 0.08
    long = _series_table({"id": z, "a": a, "b": b, "c": 0.3 * z + 0.01 * rng.normal(size=n)}, n)
    long["unit"] *= 50
    out = analyse(long, Options(residualisers=("linear",), example_boot=0, pool_by=()))
    row = _cell(out, "r", "a", "b")
    assert row["conclusion"] == "positive" and row["step0_changes"] is True
    assert row["ci_low_no_step0"] < 0 < row["ci_high_no_step0"] and abs(row["r_no_step0"]) < 0.5
    steady = _cell(out, "r", "a", "c")
    assert steady["step0_changes"] is False and math.isfinite(steady["r_no_step0"])
    assert _cell(out, "pooled", "a", "b")["step0_changes"] is True  # the single-run pool too
    dropped = analyse(long, Options(residualisers=("linear",), example_boot=0, pool_by=(), drop_step0=True))
    d = _cell(dropped, "r", "a", "b")
    assert d["n"] == d["n_units"] == n - 1 and math.isnan(d["r_no_step0"]) and d["step0_changes"] is None
    assert (d["r"], d["ci_low"], d["ci_high"]) == pytest.approx(
        (row["r_no_step0"], row["ci_low_no_step0"], row["ci_high_no_step0"]), abs=1e-9
    )
    off = analyse(long, Options(residualisers=("linear",), example_boot=0, pool_by=(), step0_check=False))
    assert off["r_no_step0"].isna().all() and off["step0_changes"].isna().all()


@pytest.mark.slow  # a pool of worker processes
def test_runs_analysed_in_parallel_processes_give_the_same_table():
    """`workers` splits the runs over processes: every cell (its example bootstrap, its block
    bootstrap) draws from a stream seeded by the cell itself, so the table is equal, value for
    value, and its rows in the same order; a run with no examples of its own stays without them."""
    rng = np.random.default_rng(11)
    long = _long(rng, n_steps=10)
    ex = []
    for (model, run, unit, ts), g in long.groupby(["model", "run", "unit", "testset"]):
        if run == "m2/s0":
            continue  # no per-example predictions for this run: its example intervals are NaN
        p = float(np.clip(g["score"].iloc[0], 0.05, 0.95))
        correct = (rng.uniform(size=30) < p).astype(float)
        ex.append(
            pd.DataFrame(
                {"model": model, "run": run, "unit": unit, "testset": ts, "example": np.arange(30), "correct": correct}
            )
        )
    ex = pd.concat(ex, ignore_index=True)
    opts = Options(residualisers=("linear", "gam"), n_boot=100, n_perm=100, example_boot=40, pool_by=())
    one = analyse(long, opts, ex)
    two = analyse(long, opts, ex, workers=2)
    pd.testing.assert_frame_equal(one, two)
    per_run = one[one["run"] != "pooled"]
    assert set(per_run["run"]) == {"m1/s0", "m1/s1", "m2/s0"}
    assert per_run.loc[per_run["run"] == "m1/s0", "ex_ci_low"].notna().all()
    assert per_run.loc[per_run["run"] == "m2/s0", "ex_ci_low"].isna().all()


def test_testsets_that_share_items_are_not_correlated_and_the_answer_says_why():
    """``task_groups`` (an lm-eval group beside its subtasks): the pair of a group and its own subtask
    is NaN in every run and pooled row with a note saying they share items, in every method, and the
    agreement row says so; every other cell is as without it (its p-value adjusted in a smaller
    family), in one process or two."""
    rng = np.random.default_rng(3)
    long = _long(rng, testsets=("a", "b", "c", "g"))
    opts = Options(
        residualisers=("linear",), methods=("pearson", "spearman"), n_boot=100, n_perm=100, example_boot=0, pool_by=()
    )
    plain = analyse(long, opts)
    groups = {"g": ["a", "b"]}
    got = analyse(long, opts, task_groups=groups)
    assert got.equals(analyse(long, opts, task_groups=groups, workers=2))
    shared = got["x"].isin(["a", "b"]) & (got["y"] == "g")
    assert shared.sum() == 2 * 5 * 2  # (a, g), (b, g) x (3 runs + 2 pooled) x 2 methods
    assert got.loc[shared, "r"].isna().all() and got.loc[shared, "r_eiv"].isna().all()
    runs = got[shared & (got["run"] != "pooled")]
    assert runs["note"].str.startswith("a and g share items (g includes a)").sum() == 3 * 2
    assert runs["note"].str.startswith("b and g share items (g includes b)").sum() == 3 * 2
    assert got.loc[shared & (got["run"] == "pooled"), "note"].str.contains("share items").all()
    # the refused pairs leave the heatmap's correction family: the others' adjusted p-values can only fall
    same = [c for c in got.columns if c not in ("p_adj", "significant")]
    pd.testing.assert_frame_equal(
        got.loc[~shared, same].reset_index(drop=True), plain.loc[~shared, same].reset_index(drop=True)
    )
    assert (got.loc[~shared, "p_adj"].fillna(0) <= plain.loc[~shared, "p_adj"].fillna(0) + 1e-12).all()
    assert np.isfinite(got.loc[~shared, "r"]).all()
    agree = agreement(got).set_index(["x", "y", "method"])
    for x in ("a", "b"):
        for m in ("pearson", "spearman"):
            row = agree.loc[(x, "g", m)]
            assert row["verdict"] == "no data"
            assert row["note"] == f"{x} and g share items (g includes {x}): " + (
                "their item noise is correlated, so their partial correlation is not computed "
                "(docs/analysis.md#testsets-that-share-items)"
            )
    assert agree.loc[("a", "b", "pearson"), "verdict"] != "no data"
    # a subtask of the in-domain set: every pair of it is left out, saying so
    inside = analyse(long, opts, task_groups={"id": ["c"]})
    with_c = (inside["x"] == "c") | (inside["y"] == "c")
    assert inside.loc[with_c, "r"].isna().all()
    assert (
        inside.loc[with_c & (inside["run"] != "pooled"), "note"]
        .str.startswith("c shares items with the in-domain testset id (id includes c)")
        .all()
    )
    assert np.isfinite(inside.loc[~with_c, "r"]).all()
