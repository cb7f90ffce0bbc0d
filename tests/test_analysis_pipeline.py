"""The analysis of whole tables: per-run and pooled rows, degenerate input, the
example-level bootstrap, reading long/wide tables, and the figures."""
import logging
import math

import numpy as np
import pandas as pd
import pytest

from oodcorr.analysis import COLUMNS, Options, analyse, partial_corr
from oodcorr.analysis.simulate import ar1_series
from oodcorr.analysis.tables import from_long, from_scores, from_wide, read_table
from oodcorr.io import DataError

FAST = Options(n_boot=300, n_perm=300, example_boot=60)


def _long(rng, n_steps=12, runs=(("m1", 0), ("m1", 1), ("m2", 0)), testsets=("a", "b", "c")):
    rows = []
    for model, seed in runs:
        for step in range(n_steps):
            z = 0.5 + 0.03 * step + rng.normal(0, 0.01)
            rows.append({"model": model, "in_domain": "id", "run": f"{model}/s{seed}", "unit": step * 10,
                         "testset": "id", "score": z})
            for ts in testsets:
                rows.append({"model": model, "in_domain": "id", "run": f"{model}/s{seed}", "unit": step * 10,
                             "testset": ts, "score": 0.4 * z + rng.normal(0, 0.02)})
    return pd.DataFrame(rows)


def _cell(out, run, x, y, method="pearson", residualiser="linear", model=None):
    sel = out[(out.run == run) & (out.x == x) & (out.y == y) & (out.method == method)
              & (out.residualiser == residualiser) & ((out.model == model) if model else True)]
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
    assert row["r"] == pytest.approx(partial_corr(one["a"], one["c"], one["id"])["r"], abs=1e-12)
    assert row["ci_low"] <= row["r"] <= row["ci_high"] and row["n"] == 12 and row["block_length"] == 3
    assert row["p_method"] == "exact block-permutation" and row["p"] == row["p_perm"]  # 4 blocks: 24 orderings
    pooled = _cell(out, "pooled", "a", "c", model="m1")
    rs = [_cell(out, r, "a", "c")["r"] for r in ("m1/s0", "m1/s1")]
    assert pooled["model"] == "m1" and pooled["n_runs"] == 2
    assert pooled["r"] == pytest.approx(np.tanh(np.arctanh(rs).mean()))
    # p_adj: Holm within each (model, run, method, residualiser) family of 3 pairs
    fam = out[(out.run == "m1/s0") & (out.method == "pearson") & (out.residualiser == "linear")]
    p = np.sort(fam["p"].to_numpy())
    assert fam["p_adj"].min() == pytest.approx(min(1.0, 3 * p[0]))
    assert (out["significant"] == (out["p_adj"] < 0.05)).all()


def test_cells_do_not_change_when_a_testset_or_run_is_added():
    rng = np.random.default_rng(1)
    long = _long(rng, testsets=("a", "b", "c", "d"))
    small = long[(long.testset != "d") & (long.run != "m2/s0")]
    full, part = analyse(long, FAST), analyse(small, FAST)
    a, b = _cell(full, "m1/s0", "a", "b"), _cell(part, "m1/s0", "a", "b")
    for col in ("r", "ci_low", "ci_high", "p", "p_perm"):
        assert a[col] == b[col], col


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
    assert note("a", "gappy") == "only 3 complete points of 10 (the others have a missing value); the linear residualiser needs at least 4"
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
                rows.append({"model": "m", "in_domain": "id", "run": "r", "unit": step, "testset": ts,
                             "score": correct.mean()})
                ex.append(pd.DataFrame({"model": "m", "run": "r", "unit": step, "testset": ts,
                                        "example": np.arange(n_ex), "correct": correct}))
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


def test_exchangeable_units_use_the_t_test_and_iid_resampling():
    rng = np.random.default_rng(6)
    long = _long(rng, runs=(("m", 0),))
    long["unit"] = "seed-" + long["unit"].astype(str)
    row = _cell(analyse(long, FAST), "m/s0", "a", "b")
    assert row["block_length"] == 1 and row["p_method"] == "t-test" and row["p"] == row["p_param"]


# ---- reading tables --------------------------------------------------------------------------


WIDE = "\ufeffRun,ID acc,A,B,C,notes\nRun 0,0.80,0.5,0.6,0.1,x\nRun 1,0.82,0.4,0.7,0.2,y\n" \
       "Run 2,0.81,0.45,0.65,0.3,\nRun 3,0.83,0.41,0.69,0.35,\nRun 4,0.84,0.43,0.62,0.2,\n" \
       "Mean,0.82,0.44,0.65,0.23,\nStandard deviation:,0.01,0.03,0.04,0.1,\nmin (all runs),0.8,0.4,0.6,0.1,\n,,,,,\n,,,,,\n"


def test_wide_table_summary_rows_are_excluded_with_a_logged_message(tmp_path, caplog):
    p = tmp_path / "wide.csv"
    p.write_text(WIDE, encoding="utf-8")
    df, where = read_table(p)
    with caplog.at_level(logging.WARNING):
        long = from_wide(df, unit="Run", in_domain="ID acc", source=str(p), exclude=("notes",))
    assert sorted(long["unit"].unique()) == [f"Run {i}" for i in range(5)]
    assert set(long["testset"]) == {"ID acc", "A", "B", "C"} and len(long) == 5 * 4
    for line, label in ((7, "'Mean'"), (8, "'Standard deviation:'"), (9, "'min (all runs)'")):
        assert f"line {line}, unit {label}: a summary row" in caplog.text
    assert "excluded 2 empty row(s) (line 10-11)" in caplog.text


def test_wide_table_errors_name_the_line_or_column(tmp_path):
    p = tmp_path / "wide.csv"
    p.write_text(WIDE, encoding="utf-8")
    df, _ = read_table(p)
    with pytest.raises(DataError, match="column 'notes' is not numeric"):
        from_wide(df, unit="Run", in_domain="ID acc", source="t")
    with pytest.raises(DataError, match="in-domain testset 'MNLI' is not a column"):
        from_wide(df, unit="Run", in_domain="MNLI", source="t", exclude=("notes",))
    p.write_text(WIDE.replace("Run 2,", ",", 1), encoding="utf-8")
    df, _ = read_table(p)
    with pytest.raises(DataError, match="line 4 has scores but no value in the unit column 'Run'"):
        from_wide(df, unit="Run", in_domain="ID acc", source="t", exclude=("notes",))


def test_long_table_and_workflow_scores_give_the_same_cells():
    rng = np.random.default_rng(8)
    long = _long(rng, runs=(("m", 0),))
    scores = long.rename(columns={"run": "run_id", "unit": "step", "score": "accuracy"})
    scores["role"] = np.where(scores.testset == "id", "in-domain", "ood")
    scores["n_train"], scores["seed"] = 8, 0
    canon, info = from_scores(scores)
    assert info.to_dict("records") == [{"run": "m/s0", "n_train": 8, "seed": 0}]
    via_long = from_long(scores, unit="step", testset="testset", score="accuracy", in_domain="id", model="model",
                         run="run_id")
    a, b = analyse(canon, FAST), analyse(via_long, FAST)
    pd.testing.assert_frame_equal(a, b)
    two = pd.concat([scores, scores[scores.testset == "a"].assign(testset="a2", role="in-domain")])
    notes = analyse(from_scores(two)[0], FAST)["note"]
    assert notes.str.contains("no unique in-domain testset for this run").all()
    with pytest.raises(DataError, match="'mnli' does not occur in column 'testset'"):
        from_long(scores, unit="step", testset="testset", score="accuracy", in_domain="mnli")


# ---- figures ---------------------------------------------------------------------------------


def test_heatmap_lower_triangle_stars_and_hatched_nan(tmp_path):
    from oodcorr.plots import heatmap, heatmap_grid

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


def test_learning_curves_and_scatter_draw_every_testset_and_fit(tmp_path):
    from oodcorr.plots import learning_curves, scatter

    rng = np.random.default_rng(10)
    long = _long(rng, runs=(("m", 0), ("m", 1)))
    drawn = learning_curves(long, "m", str(tmp_path / "lc.png"))
    assert drawn == {"id": ["a", "b", "c", "id"]}
    fits = scatter(long, "m", str(tmp_path / "sc.png"), residualisers=("linear", "gam"))
    assert fits == {"a": 4, "b": 4, "c": 4}  # 2 runs x (linear + GAM) per testset
    few = long[long.unit < 50]  # 5 checkpoints: too few for the GAM, the line is still drawn
    assert scatter(few, "m", str(tmp_path / "sc2.png"), residualisers=("linear", "gam")) == {"a": 2, "b": 2, "c": 2}
    words = long.assign(unit="u" + long["unit"].astype(str))
    assert learning_curves(words, "m", str(tmp_path / "lc2.png")) == {}
    for f in ("lc.png", "sc.png", "sc2.png", "lc2.png"):
        assert (tmp_path / f).read_bytes()[:4] == b"\x89PNG"
