"""The example-level bootstrap (oodcorr.analysis.per_run.example_boot): the Pearson cells of a linear-kind
residualiser, all at once, give the intervals the cell-by-cell loop gives (to rounding), with its
drops (a resample whose series is constant) and its notes; the batched intervals of
oodcorr.analysis.cell.resample equal the single ones."""

from __future__ import annotations

import math

import numpy as np
import pytest

from oodcorr.analysis import Options
from oodcorr.analysis.cell.correlate import corr, residual_pair
from oodcorr.analysis.cell.resample import interval, intervals
from oodcorr.analysis.items.item_noise import item_matrices
from oodcorr.analysis.per_run.example_boot import RunExamples, example_ci, pearson_cis
from oodcorr.analysis.simulate.items import item_table

T = 12


def _run(seed: int = 4):
    """One run's per-item matrices: an in-domain set and two OOD sets simulated item by item, and a
    third OOD set of 3 items of which only one ever changes (a resample without it is constant)."""
    rng = np.random.default_rng(seed)
    long, items = item_table(rng, [0.4], 1, T, (150, 60, 60))
    mats, problems = item_matrices(items, list(range(T)))
    tiny = np.zeros((T, 3))
    tiny[:, 0] = 1.0
    tiny[:, 2] = (rng.uniform(size=T) < 0.5).astype(float)
    mats["tiny"] = tiny
    cols = {t: m.mean(axis=1) for t, m in mats.items()}  # the scores table's
    mats["ood1"][[3, 7]] = np.nan  # no per-item records at two units the scores have: a why-not note
    return mats, problems, cols


@pytest.mark.parametrize("res", ["spline", "spline+step", "linear", "linear+step"])
@pytest.mark.parametrize("kind", ["fisher-z", "percentile"])
def test_all_cells_at_once_give_the_loops_intervals(res, kind):
    mats, problems, cols = _run()
    opts = Options(example_boot=80, interval=kind, pool_by=())
    rex = RunExamples(mats, problems, list(range(T)), opts, "m", "r")
    steps = np.arange(T, dtype=float) * 100
    z = cols["in-domain"]
    covars = np.column_stack([z, steps]) if res.endswith("step") else z
    cells, loop = [], []
    for a, b in [("ood0", "tiny"), ("ood0", "ood1"), ("ood1", "tiny"), ("ood0", "nope")]:
        x = cols[a]
        y = cols.get(b, cols["ood0"] * 0.5 + 0.1 * np.sin(np.arange(T)))
        rp = residual_pair(x, y, covars, "pearson", res)
        cells.append((a, b, rp["mask"], corr(rp["rx"], rp["ry"], "pearson"), (rp["lam_x"], rp["lam_y"])))
        loop.append(example_ci(rex, "in-domain", a, b, steps, "pearson", res, rp, opts, {}))
    got = pearson_cis(rex, "in-domain", cells, steps, res, opts)
    for (lo, hi, note), (lo2, hi2, note2) in zip(loop, got):
        assert note == note2
        if note:
            assert math.isnan(lo2) and math.isnan(hi2)
        else:
            assert lo2 == pytest.approx(lo, abs=1e-12) and hi2 == pytest.approx(hi, abs=1e-12)
    assert got[0][2] == "" and np.isfinite(got[0][0])  # some resamples of "tiny" dropped, enough left
    assert got[1][2] == "no per-example predictions for ood1 at unit(s) [3, 7]"
    assert got[3][2] == "no per-example predictions for nope"


def test_too_few_resamples_is_said_as_the_loop_says_it():
    """Three sets of 3 items, one of which changes: most resamples leave one of the three series
    constant, and the cell says how many gave a value, in both paths."""
    rng = np.random.default_rng(9)
    mats = {}
    for t in ("z", "x", "y"):
        m = np.zeros((T, 3))
        m[:, 0] = 1.0
        m[:, 2] = (rng.uniform(size=T) < 0.5).astype(float)
        mats[t] = m
    opts = Options(example_boot=40, pool_by=())
    rex = RunExamples(mats, {}, list(range(T)), opts, "m", "r")
    z, x, y = (mats[t].mean(axis=1) for t in ("z", "x", "y"))
    rp = residual_pair(x, y, z, "pearson", "linear")
    one = example_ci(rex, "z", "x", "y", None, "pearson", "linear", rp, opts, {})
    cells = [("x", "y", rp["mask"], corr(rp["rx"], rp["ry"], "pearson"), (None, None))]
    ((lo, hi, note),) = pearson_cis(rex, "z", cells, None, "linear", opts)
    assert note == one[2] and note.startswith("only ") and note.endswith(" of 40 example resamples gave a value")
    assert math.isnan(lo) and math.isnan(hi)


@pytest.mark.parametrize("kind", ["fisher-z", "percentile"])
def test_batched_intervals_equal_the_single_ones(kind):
    rng = np.random.default_rng(2)
    RS = np.tanh(rng.normal(0.3, 0.2, size=(50, 6)))
    RS[rng.uniform(size=RS.shape) < 0.2] = np.nan
    RS[:, 5] = 0.4  # no spread: the interval is r itself
    r = np.tanh(rng.normal(0.3, 0.1, size=6))
    lo, hi = intervals(r, RS, 0.9, kind)
    for j in range(6):
        rs = RS[:, j][np.isfinite(RS[:, j])]
        want = interval(float(r[j]), rs, 0.9, kind)
        assert (lo[j], hi[j]) == pytest.approx(want, abs=1e-12)
