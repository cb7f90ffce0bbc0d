import math

import numpy as np
import pandas as pd
import pingouin as pg
import pytest

from oodcorr.analysis import fisher_mean, model_summary, partial_corr, run_pairs


def _ols_residuals(y, z):
    X = np.column_stack([np.ones_like(z), z])
    return y - X @ np.linalg.solve(X.T @ X, X.T @ y)


@pytest.mark.parametrize("seed", range(5))
def test_linear_partial_corr_equals_numpy_ols_and_pingouin(seed):
    rng = np.random.default_rng(seed)
    n = 12 + seed * 5
    z = rng.normal(size=n)
    x = 0.8 * z + rng.normal(size=n)
    y = -0.5 * z + 0.3 * x + rng.normal(size=n)
    got = partial_corr(x, y, z)
    rx, ry = _ols_residuals(x, z), _ols_residuals(y, z)
    want = np.corrcoef(rx, ry)[0, 1]
    assert got["r"] == pytest.approx(want, abs=1e-10)
    ref = pg.partial_corr(pd.DataFrame({"x": x, "y": y, "z": z}), x="x", y="y", covar="z")
    assert got["r"] == pytest.approx(ref["r"].iloc[0], abs=1e-10)
    assert got["p"] == pytest.approx(ref["p_val"].iloc[0], rel=1e-8)
    assert got["n"] == n


def test_spearman_matches_pingouin():
    rng = np.random.default_rng(7)
    z = rng.normal(size=30)
    x = np.exp(z) + rng.normal(size=30)
    y = z ** 3 + rng.normal(size=30)
    got = partial_corr(x, y, z, method="spearman")
    ref = pg.partial_corr(pd.DataFrame({"x": x, "y": y, "z": z}), x="x", y="y", covar="z", method="spearman")
    assert got["r"] == pytest.approx(ref["r"].iloc[0], abs=1e-10)


@pytest.mark.parametrize("x, y, z, note", [
    ([1, 1, 1, 1, 1], [1, 2, 3, 4, 6], [1, 3, 2, 5, 4], "x is constant"),
    ([1, 2, 3, 4, 6], [1, 3, 2, 5, 4], [7, 7, 7, 7, 7], "covariate (in-domain score) is constant"),
    ([1, 2, 3], [3, 1, 2], [1, 2, 4], "only 3 complete points"),
    ([1, 2, np.nan, 4, 5], [2, 1, 4, 3, np.nan], [1, 2, 3, 4, 5], "only 3 complete points"),
    ([1, 2, 3, 4, 5], [2, 4, 6, 8, 10], [1, 2, 3, 4, 5], "zero residual"),
])
def test_degenerate_inputs_give_nan_with_a_reason(x, y, z, note):
    got = partial_corr(x, y, z)
    assert math.isnan(got["r"]) and math.isnan(got["p"])
    assert note in got["note"]


def _scores(rng, n_steps=10, runs=(("m1", 0), ("m1", 1), ("m2", 0))):
    rows = []
    for model, seed in runs:
        for step in range(n_steps):
            for ts, role in (("id", "in-domain"), ("a", "ood"), ("b", "ood"), ("c", "ood")):
                rows.append({"model": model, "in_domain": "d", "n_train": 8, "seed": seed,
                             "run_id": f"{model}/d/n8/seed{seed}", "step": step, "testset": ts, "role": role,
                             "accuracy": rng.uniform(0.4, 0.9)})
    return pd.DataFrame(rows)


def test_run_pairs_one_row_per_run_pair_method():
    rng = np.random.default_rng(0)
    df = _scores(rng)
    pairs = run_pairs(df, methods=("pearson", "spearman"))
    assert len(pairs) == 3 * 3 * 2  # runs x pairs (ab, ac, bc) x methods
    assert set(zip(pairs.x, pairs.y)) == {("a", "b"), ("a", "c"), ("b", "c")}
    one = df[df.run_id == "m1/d/n8/seed1"].pivot(index="step", columns="testset", values="accuracy")
    want = partial_corr(one["a"], one["c"], one["id"])["r"]
    row = pairs[(pairs.run_id == "m1/d/n8/seed1") & (pairs.x == "a") & (pairs.y == "c") & (pairs.method == "pearson")]
    assert row["r"].iloc[0] == pytest.approx(want)
    summary = model_summary(pairs)
    m1 = summary[(summary.model == "m1") & (summary.x == "a") & (summary.y == "b") & (summary.method == "pearson")]
    rs = pairs[(pairs.model == "m1") & (pairs.x == "a") & (pairs.y == "b") & (pairs.method == "pearson")]["r"]
    assert m1["r_mean"].iloc[0] == pytest.approx(np.tanh(np.arctanh(rs).mean()))
    assert m1["n_runs"].iloc[0] == 2


def test_missing_steps_and_duplicates_are_reported():
    rng = np.random.default_rng(1)
    df = _scores(rng, runs=(("m", 0),))
    # testset c evaluated at only 3 steps
    df = df[~((df.testset == "c") & (df.step > 2))]
    pairs = run_pairs(df)
    c = pairs[pairs.y == "c"]
    assert c["r"].isna().all() and c["note"].str.contains("only 3 complete points").all()
    ab = pairs[(pairs.x == "a") & (pairs.y == "b")]
    assert ab["r"].notna().all()
    dup = pd.concat([df, df.iloc[:1]])
    pairs = run_pairs(dup)
    assert pairs["r"].isna().all() and pairs["note"].str.contains("duplicate").all()


def test_fisher_mean():
    assert fisher_mean([0.5, np.nan]) == pytest.approx(0.5)
    assert math.isnan(fisher_mean([np.nan]))
    assert fisher_mean([0.2, 0.6]) == pytest.approx(np.tanh((np.arctanh(0.2) + np.arctanh(0.6)) / 2))


def test_heatmap_marks_nan_cells_and_handles_no_pairs(tmp_path):
    from oodcorr.plots import heatmap

    rng = np.random.default_rng(2)
    summary = model_summary(run_pairs(_scores(rng)))
    summary.loc[(summary.x == "a") & (summary.y == "b"), "r_mean"] = np.nan
    out = tmp_path / "h.png"
    cells = heatmap(summary, "m1", str(out))
    assert out.read_bytes()[:4] == b"\x89PNG"
    assert set(cells) == {("d", "b", "a"), ("d", "c", "a"), ("d", "c", "b")}  # strict lower triangle
    assert cells[("d", "b", "a")] == "n/a"
    r_bc = summary[(summary.model == "m1") & (summary.x == "b") & (summary.y == "c")]["r_mean"].iloc[0]
    assert cells[("d", "c", "b")].startswith(f"{r_bc:+.2f}")
    assert heatmap(summary.iloc[0:0], "m1", str(tmp_path / "e.png")) == {}
    assert (tmp_path / "e.png").stat().st_size > 1000
