"""oodcorr design (issue 26): the power of each verdict by simulation, checked against a closed form,
against the analysis' own pipeline on the same runs, and on a pilot whose AR(1) coefficient is known."""

import json
import math

import numpy as np
import pandas as pd
import pytest
from scipy import integrate, special, stats

from oodcorr.analysis import Options, agreement, analyse
from oodcorr.analysis.across.consensus import across_models
from oodcorr.analysis.across.multitest import adjust
from oodcorr.analysis.cell.correlate import POOLING_CAP, fisher_z
from oodcorr.analysis.cell.inference import corrected_phis
from oodcorr.analysis.cell.residualise import linear_maker
from oodcorr.analysis.design import pilot as design_pilot
from oodcorr.analysis.design import power as dz
from oodcorr.analysis.simulate.items import item_table
from oodcorr.analysis.simulate.runs import run_scores, study_table
from oodcorr.cli import main
from oodcorr.launch import budget, grid
from oodcorr.planning.plan import load
from oodcorr.planning.schema import read_config

from helpers import MICRO, REPO, between_runs, model_means, score_row


# ---- a closed form: iid residuals ------------------------------------------------------------------
def exact_power(rho: float, n_units: int, alpha: float = 0.05) -> float:
    """Power of the two-sided t-test of a partial correlation on one covariate over ``n_units`` i.i.d.
    normal units: a partial correlation on one covariate is distributed as an ordinary correlation of
    n - 1 pairs (Fisher 1924), whose exact density (Fisher 1915, with Hotelling's hypergeometric
    series) is integrated beyond the test's critical r."""
    m = n_units - 1
    t = stats.t.ppf(1 - alpha / 2, m - 2)
    rc = t / math.sqrt(m - 2 + t * t)

    def density(r):
        c = (m - 2) * math.exp(special.gammaln(m - 1) - special.gammaln(m - 0.5)) / math.sqrt(2 * math.pi)
        return (
            c
            * (1 - rho * rho) ** ((m - 1) / 2)
            * (1 - r * r) ** ((m - 4) / 2)
            / (1 - rho * r) ** (m - 1.5)
            * special.hyp2f1(0.5, 0.5, m - 0.5, (1 + rho * r) / 2)
        )

    return integrate.quad(density, rc, 1)[0] + integrate.quad(density, -1, -rc)[0]


def test_per_run_power_with_independent_checkpoints_is_the_partial_correlation_t_tests():
    # phi = 0: the modified t-test is the ordinary one on n - 1 effective points, except where a run's
    # residuals happen to look autocorrelated (then it is more cautious): by hand, 0.050, 0.254 and 0.836
    # at effects 0, 0.3, 0.6 over 21 checkpoints; 20,000 simulated runs gave 0.047, 0.249, 0.829
    assert [round(exact_power(r, 21), 3) for r in (0.0, 0.3, 0.6)] == [0.05, 0.254, 0.836]
    # (the closed form is the line's: straight series, the linear residualiser)
    line, linear = dz.Assumptions(phi=0.0, shape="line"), dz.Settings(residualiser="linear")
    c = dz.curve(dz.Grid(4, 1, 21, 1), line, linear, dz.Draws((0.0, 0.3, 0.6), 1000, 3))
    for e, got, se in zip(c.effects, c.power["cell"], c.se["cell"]):
        want = exact_power(e, 21)
        assert got == pytest.approx(want, abs=4 * se + 0.01), (e, got, want)
        assert got <= want + 2 * se  # never more liberal than the exact test
    # with one pair per table the correction changes nothing
    assert c.power["cell_corrected"] == c.power["cell"]


def test_holm_over_the_table_is_the_first_steps_threshold_when_the_other_pairs_are_null():
    # 21 pairs, the others null: a pair is found about when its p < 0.05 / 21 (Holm's first step)
    line, linear = dz.Assumptions(phi=0.0, shape="line"), dz.Settings(residualiser="linear")
    c = dz.curve(dz.Grid(2, 1, 21, 21), line, linear, dz.Draws((0.6,), 1500, 4))
    a = 0.05 / 21
    t = stats.t.ppf(1 - a / 2, 18)
    # the t-test at alpha / 21 by Fisher's z: r_c, then the normal approximation of atanh r
    rc = t / math.sqrt(18 + t * t)
    approx = stats.norm.sf((math.atanh(rc) - math.atanh(0.6)) * math.sqrt(21 - 4))
    assert c.power["cell_corrected"][0] == pytest.approx(approx, abs=0.05)
    assert c.power["cell_corrected"][0] < c.power["cell"][0] - 0.3


# ---- the fast path is the pipeline ------------------------------------------------------------------
def _as_table(scores: np.ndarray, models: int, runs: int) -> pd.DataFrame:
    rows = []
    for i, sc in enumerate(scores):
        m, k = divmod(i, runs)
        for t, row in enumerate(sc):
            for name, v in zip(("in-domain", "ood0", "ood1"), row):
                rows.append(score_row(f"m{m}", f"m{m}-r{k}", t, name, v, in_domain="in-domain"))
    return pd.DataFrame(rows)


def test_run_statistics_and_the_verdicts_equal_the_analysis_on_the_same_runs():
    M, K, n = 5, 3, 15
    rhos = np.repeat([0.6, 0.5, 0.7, -0.2, 0.6], K)
    scores = run_scores(np.random.default_rng(7), rhos, n, 0.6, sampling_sd=0.01)
    st = dz.run_statistics(scores)
    table = _as_table(scores, M, K)
    opts = Options(pool_by=(), step0_check=False, example_boot=0, residualisers=("linear",))
    pc = analyse(table, opts)
    runs = pc[pc["run"] != "pooled"].sort_values(["model", "run"])
    for col in ("r", "p", "se_z", "n_eff", "phi_x", "phi_y", "ci_low", "ci_high"):
        np.testing.assert_allclose(st[col], runs[col].to_numpy(float), rtol=1e-8, atol=1e-12, err_msg=col)
    # the across-model step: the same numbers and the same verdict as agreement()
    res = dz.studies_of({k: v.reshape(1, M, K) for k, v in st.items()}, dz.Settings())
    words = dz.verdicts_of(res, res, dz.Grid(M, K, n, 1), dz.Assumptions(), dz.Settings(), np.random.default_rng(0))
    row = agreement(pc, opts.alpha, opts.agreement_correction, opts.level, opts.near_zero).iloc[0]
    assert words == [row["verdict"]]
    assert math.tanh(res["z"][0]) == pytest.approx(row["r_consensus"], rel=1e-9)
    assert res["p_reversal"][0] == pytest.approx(row["p_reversal"], rel=1e-9)
    assert res["p_heterogeneity"][0] == pytest.approx(row["p_heterogeneity"], rel=1e-9)
    assert res["p_mean"][0] == pytest.approx(row["p_mean"], rel=1e-9)
    # the studies' p-values are the table's: the bounds and the interval, which no verdict reads, left out
    full = dz.studies_of({k: v.reshape(1, M, K) for k, v in st.items()}, dz.Settings(), intervals=True)
    assert full["p_generalises"][0] == pytest.approx(row["p_generalises"], rel=1e-9)
    assert res["p_generalises"][0] == pytest.approx(row["p_generalises"], abs=3e-3)  # a coarser grid of tau
    assert math.isnan(res["tol_hi"][0]) and math.isnan(res["pi_lo"][0])
    assert math.tanh(full["tol_hi"][0]) == pytest.approx(row["tol_high_consensus"], rel=1e-9)


@pytest.mark.parametrize("residualiser, n", [("spline", 21), ("spline+step", 16), ("spline", 6)])
def test_the_spline_runs_equal_the_analysis_on_the_same_curved_runs(residualiser, n):
    # each OOD score a logistic curve of the in-domain score of its own per run; the batched spline (one
    # basis per run, REML per series) is the pipeline's cell at 1e-8; below min_points (8) both use the line
    M, K = 4, 3
    rhos = np.repeat([0.6, 0.5, -0.3, 0.0], K)
    scores = run_scores(np.random.default_rng(8), rhos, n, 0.5, shape="curve")
    st = dz.run_statistics(scores, residualiser=residualiser)
    opts = Options(pool_by=(), step0_check=False, example_boot=0, residualisers=(residualiser,))
    pc = analyse(_as_table(scores, M, K), opts)
    runs = pc[(pc["run"] != "pooled") & (pc["residualiser"] == residualiser)].sort_values(["model", "run"])
    assert len(runs) == M * K
    for col in ("r", "p", "se_z", "n_eff", "phi_x", "phi_y", "ci_low", "ci_high"):
        np.testing.assert_allclose(st[col], runs[col].to_numpy(float), rtol=1e-8, atol=1e-12, err_msg=col)
    line = dz.run_statistics(scores)
    if n < 8:  # the spline is the line there, and says it used 2 (3 with the step) degrees of freedom
        np.testing.assert_allclose(st["r"], line["r"], rtol=1e-12)
        assert (st["edf_x"] == 2).all() and runs["note"].str.contains("the line was used").all()
    else:  # the curves bend: the spline spends more than the line's degrees of freedom and moves r
        assert np.median(st["edf_x"]) > 3 + residualiser.endswith("step")
        assert np.abs(st["r"] - line["r"]).max() > 0.1


def test_a_curved_shape_is_drawn_when_asked_and_the_line_fakes_model_differences_there():
    # the same draws, the OOD scores on a curve instead of a line: the in-domain score and the residual series
    # are the line's, the OOD score's function of the in-domain score a monotone logistic rise (or fall) of 0.3
    line = run_scores(np.random.default_rng(3), np.zeros(200), 30, 0.5)
    curve = run_scores(np.random.default_rng(3), np.zeros(200), 30, 0.5, shape="curve")
    np.testing.assert_array_equal(line[:, :, 0], curve[:, :, 0])
    z = curve[:, :, 0]
    for j, a in ((1, 0.8), (2, -0.4)):
        f = curve[:, :, j] - line[:, :, j] + a * z  # the noise cancels: f(z)
        assert (np.sign(a) * f > 0).all() and (np.sign(a) * f < 0.3).all()
        order = np.argsort(z, axis=1)
        assert (np.sign(a) * np.diff(np.take_along_axis(f, order, 1), axis=1) >= 0).all()
        # a line through f leaves a bend in every run, larger than the residual series' sd (0.02) in most
        X = np.stack([np.ones_like(z), z], axis=2)
        beta = np.linalg.lstsq(X[0], f[0], rcond=None)[0]
        bend = [np.std(fb - Xb @ np.linalg.lstsq(Xb, fb, rcond=None)[0]) for Xb, fb in zip(X, f)]
        assert np.median(bend) > 0.02 and beta[1] * a > 0
    with pytest.raises(ValueError, match="unknown shape"):
        run_scores(np.random.default_rng(0), [0.0], 10, 0.5, shape="wiggle")
    with pytest.raises(ValueError, match="unknown shape"):
        dz.Assumptions(shape="wiggle")
    # no correlation anywhere, curved series: the line says "models differ" in most studies, the spline rarely
    g, a = dz.Grid(8, 1, 40, 1), dz.Assumptions(phi=0.5)
    differ = {}
    for res in ("linear", "spline"):
        c = dz.curve(g, a, dz.Settings(residualiser=res), dz.Draws((0.0,), 60, 5))
        differ[res] = sum(v for k, v in c.verdicts["same"][0].items() if "differ" in k or "reversal" in k)
    assert differ["linear"] > 0.5 and differ["spline"] < 0.15, differ


def test_stacked_spline_bases_give_each_runs_own_smoother_a_gap_between_knots_included():
    # one run's in-domain scores jump over four knot intervals (a loss that falls fast between two
    # checkpoints), so one B-spline has no point in its support: the one-run basis drops the direction
    # it cannot reach, the stacked one keeps it at d = 0; REML's penalty and the residual maker are
    # the same
    from oodcorr.analysis.cell.residualise import (
        GamSettings,
        reml_choose,
        reml_grid,
        spline_bases,
        spline_basis,
        spline_makers,
    )

    rng = np.random.default_rng(12)
    n = 21
    Z = np.sort(rng.uniform(size=(4, n, 1)), axis=1)
    Z[0, :, 0] = np.concatenate([np.linspace(0.0, 0.1, 6), np.linspace(0.75, 1.0, n - 6)])
    Y = np.sin(4 * Z) + 0.05 * rng.normal(size=(4, n, 2))
    Q0, W, d = spline_bases(Z, GamSettings())
    assert (d[0] == 0).any() and (d[1:] > 0).all()  # the gap's direction: kept at 0, not lost
    lam = reml_choose(Q0, W, reml_grid(d), Y)
    R = spline_makers(Q0, W, d, lam)
    for b in range(4):
        one = spline_basis(Z[b], GamSettings())
        assert len(one.d) == (d[b] > 0).sum()
        want = one.choose(Y[b])
        np.testing.assert_allclose(lam[b] / d[b].max(), want / one.d.max(), rtol=1e-9)
        for j in range(2):
            np.testing.assert_allclose(R[b, j], one.maker(want[j]), atol=1e-10)


def test_batched_steps_equal_the_one_series_functions():
    rng = np.random.default_rng(11)
    for pos in (np.arange(12), np.array([0, 1, 2, 4, 5, 6, 7, 9, 10, 11])):
        Z = rng.normal(size=(6, len(pos), 1))
        R = linear_maker(Z)
        resid = np.einsum("bij,bj->bi", R, np.cumsum(rng.normal(size=(6, len(pos))), axis=1))
        raw, phi = corrected_phis(resid, R, pos)
        for b in range(6):
            assert (raw[b], phi[b]) == pytest.approx(tuple(map(float, corrected_phis(resid[b], R[b], pos))), abs=1e-12)
            np.testing.assert_allclose(R[b], linear_maker(Z[b]), atol=1e-12)
    # the across-model rule on one study equals the per-study functions, ragged runs included
    z = np.array([0.3, 0.5, 0.1, -0.2, 0.4, 0.45])
    v = np.array([0.02, 0.03, 0.02, 0.05, 0.01, 0.02])
    model = np.array(["a", "a", "b", "c", "c", "c"])
    names, zm, Vm, pm, t2, df, q = model_means(z, v, model, np.full(6, np.nan))
    assert (t2, df, q) == pytest.approx(between_runs(z, v, model))
    Z, V, P = (np.full((1, 3, 3), x) for x in (0.0, 1.0, np.nan))
    mask = np.zeros((1, 3, 3), bool)
    for i, m in enumerate(names):
        g = np.flatnonzero(model == m)
        Z[0, i, : len(g)], V[0, i, : len(g)], mask[0, i, : len(g)] = z[g], v[g], True
    res = across_models(Z, V, mask, P)
    np.testing.assert_allclose(res["zm"][0], zm)
    np.testing.assert_allclose(res["pm"][0], pm)
    # Holm on a 2-D array is Holm on each row
    p = rng.uniform(size=(30, 7)) ** 2
    p[p < 0.02] = np.nan
    np.testing.assert_array_equal(adjust(p, "holm"), np.array([adjust(r, "holm") for r in p]))


def test_white_noise_as_large_as_the_residual_series_halves_the_correlation():
    # on both testsets: 0.6 * (0.02^2 / (0.02^2 + 0.02^2)) = 0.3 (the design's item noise, persistent and in
    # the in-domain set too: tests/analysis/test_design_items.py)
    st = dz.run_statistics(run_scores(np.random.default_rng(5), np.full(3000, 0.6), 41, 0.0, sampling_sd=0.02))
    assert math.tanh(float(np.mean(fisher_z(st["r"], POOLING_CAP)))) == pytest.approx(0.3, abs=0.03)


def test_a_curve_is_reproducible_and_rises_with_the_effect():
    g, a = dz.Grid(4, 2, 12, 6), dz.Assumptions(phi=0.5)
    c1 = dz.curve(g, a, draws=dz.Draws((0.0, 0.4, 0.8), 60, 9))
    c2 = dz.curve(g, a, draws=dz.Draws((0.0, 0.4, 0.8), 60, 9))
    assert c1.power == c2.power and c1.verdicts == c2.verdicts
    assert c1.power["generalises"][0] <= c1.power["generalises"][1] <= c1.power["generalises"][2]
    assert dz.smallest_effect([0.0, 0.4, 0.8], [0.0, 0.4, 1.0]) == pytest.approx(0.4 + 0.4 * 0.4 / 0.6)
    assert dz.smallest_effect([0.0, 0.4], [0.0, 0.5]) is None
    with pytest.raises(ValueError, match="at least 4 checkpoints"):
        dz.Grid(3, 3, 3)


# ---- a pilot whose phi is known ---------------------------------------------------------------------
@pytest.mark.parametrize("phi", [0.2, 0.7])
def test_a_pilots_phi_is_found_and_its_bias_towards_zero_removed(phi):
    pilot = study_table(np.random.default_rng([26, int(10 * phi)]), [0.3, 0.3, -0.1], 4, 21, phi, n_ood=4)
    est = design_pilot.pilot_estimates(pilot, n_boot=100)
    ph, obs = est["phi"], est["phi_observed"]
    assert est["checkpoints"] == 21 and est["runs"] == 12 and est["series"] == 48
    assert ph["estimate"] == pytest.approx(phi, abs=0.12)
    assert ph["low"] <= ph["estimate"] <= ph["high"] and ph["high"] - ph["low"] < 0.4
    assert obs["median"] <= ph["estimate"] + 1e-9  # the corrected estimate is still biased low in short runs
    # no testset sizes and no per-item correctness: no item noise known, and the notes say so
    assert est["items"]["ood_items"] is None and est["items"]["persistence"] is None
    assert any("not estimated" in n for n in est["notes"])


# ---- the command -----------------------------------------------------------------------------------
def test_design_command_writes_its_report_and_prices_the_alternatives(tmp_path, capsys):
    out = tmp_path / "d"
    args = ["design", "--configfile", str(REPO / "config/real-cpu.yaml"), "--studies", "30", "--effects", "0", "0.6"]
    assert main([*args, "--phi", "0.5", "--throughput", "20", "--workers", "1", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert printed == (tmp_path / "d.md").read_text()
    rep = json.loads((tmp_path / "d.json").read_text())
    assert (tmp_path / "d.png").stat().st_size > 10_000
    assert rep["grid"] == {"models": 1, "runs": 1, "checkpoints": 11, "pairs": 15}
    assert rep["precision"]["studies"] == 30 and rep["phis"] == [0.5] and rep["headline_phi"] == 0.5
    # the config's residualiser (the spline) on curved series; the item-noise answer's form said
    assert rep["settings"]["residualiser"] == "spline" and rep["assumptions"]["shape"] == "curve"
    assert "* residualiser spline (the config's first)" in printed and "logistic curve of its own" in printed
    assert any("r_eiv, which has the line's form only" in n for n in rep["notes"])
    names = [r["name"] for r in rep["alternatives"]]
    assert names == ["as configured", "checkpoints x2", "seeds +2", "models +50%", "examples x4"]
    by = {r["name"]: r for r in rep["alternatives"]}
    assert by["checkpoints x2"]["grid"]["checkpoints"] == 21 and by["seeds +2"]["grid"]["runs"] == 3
    # 300 examples per testset (SNLI in-domain, the OOD sets), the default item model; four times the examples
    # of the OOD sets (the change caps them at 1,200)
    items = rep["assumptions"]["items"]
    assert items == {**items, "in_domain": 300, "ood": 300, "persistence": 0.8, "residual_sd": 0.02}
    assert by["examples x4"]["items"]["ood"] == 1200 and by["examples x4"]["items"]["in_domain"] == 300
    # how many items each claim needs: the table, and the config's own testsets along it
    assert rep["items"]["sides"]["ood"]["sizes"][-1] is None and "snli" in rep["items"]["testsets"]
    assert "## How many items" in printed and "* wnli (300 items, OOD set" in printed
    # the work-based cost grows with the examples scored, the limits do not
    assert by["examples x4"]["cost"]["gpu_hours_work"] > by["as configured"]["cost"]["gpu_hours_work"]
    assert "## Budget of the grid as configured" in printed and "GPU-hours from the work" in printed
    # one model cannot say `generalises` at all (it needs 3): the report says so, and no change here fixes it
    assert rep["generalises_unreachable"]["fix"] is None and "out of reach for this grid" in printed


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--studies", "3"], "--studies 3"),
        (["--pilot", "nowhere.csv"], "nowhere.csv: file not found"),
        (["--target", "1.5"], "--target 1.5"),
        (["--throughput", "fast"], "--throughput 'fast'"),
        (["--items-ood", "3"], "--items-ood '3'"),
        (["--items-in-domain", "many"], "--items-in-domain 'many'"),
        (["--item-persistence", "1"], "persistence must lie in [0, 1)"),
    ],
)
def test_design_bad_input_is_one_error_line(extra, message, caplog, capsys, tmp_path):
    assert main(["design", "--configfile", str(MICRO), "--out", str(tmp_path / "x"), *extra]) == 2
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1 and message in errors[0]
    assert "Traceback" not in capsys.readouterr().err


def test_a_pilot_that_is_not_the_workflows_table_needs_its_in_domain_set(tmp_path, caplog):
    table = tmp_path / "pilot.csv"
    pd.DataFrame({"model": ["a"], "step": [0], "testset": ["x"], "accuracy": [0.5]}).to_csv(table, index=False)
    assert main(["design", "--configfile", str(MICRO), "--pilot", str(table)]) == 2
    assert "--pilot-in-domain" in caplog.text and str(table) in caplog.text


def test_a_pilots_per_item_correctness_gives_the_designs_item_noise(tmp_path, capsys):
    # a pilot simulated item by item (persistence 0.8); the config (real-cpu) caps its testsets at 300: its
    # sizes win over the pilot's, the pilot's persistence and residual sd are simulated
    long, items = item_table(np.random.default_rng(4), [0.3, 0.3, 0.0], 2, 12, (500, 200, 200), phi=0.5)
    long.drop(columns=["in_domain", "n"]).to_csv(tmp_path / "pilot.csv", index=False)
    items.to_csv(tmp_path / "items.csv", index=False)
    args = ["design", "--configfile", str(REPO / "config/real-cpu.yaml"), "--pilot", str(tmp_path / "pilot.csv")]
    args += ["--pilot-in-domain", "in-domain", "--pilot-unit", "unit", "--pilot-score", "score"]
    args += ["--pilot-examples", str(tmp_path / "items.csv"), "--studies", "20", "--effects", "0", "0.6"]
    args += ["--phi", "0.5", "--no-alternatives", "--no-items-table", "--workers", "1", "--out", str(tmp_path / "d")]
    assert main(args) == 0
    rep = json.loads((tmp_path / "d.json").read_text())
    est, simulated = rep["pilot"]["items"], rep["assumptions"]["items"]
    assert set(est["per_testset"]) == {"in-domain", "ood0", "ood1"}  # the config's testsets are not the pilot's
    assert (est["in_domain_items"], est["ood_items"]) == (500, 200)
    assert (simulated["in_domain"], simulated["ood"]) == (300, 300)
    assert simulated["persistence"] == est["persistence"] == pytest.approx(0.8, abs=0.1)
    assert simulated["residual_sd"] == est["residual_sd"] == pytest.approx(0.02, rel=0.35)
    assert "persistence of the item noise: **" in capsys.readouterr().out and "items" not in rep


# ---- cost from the work -------------------------------------------------------------------------------
def test_work_based_gpu_hours_by_hand():
    paper = REPO / "config/paper.yaml"
    plan = load(read_config(paper), REPO, [paper])
    names = sorted({t for d in plan.testsets for t, _ in plan.testsets[d]})
    w = budget.work(plan, budget.parse_throughput(["400", "30b=200"]), examples=dict.fromkeys(names, 1000))
    # finetune: LoRA, 4 FLOP per parameter and token; 1,000 steps x 16 x 4 x 128 tokens; 12 runs a model
    tokens = 1000 * 16 * 4 * 128
    params = {"opt-2.7b": 2.65, "opt-6.7b": 6.66, "opt-13b": 12.85, "opt-30b": 29.97, "olmo2-7b": 7.3}
    params.update({"olmo2-13b": 13.72, "olmo2-32b": 32.23, "smollm3-3b": 3.08})
    tput = {m: 200 if m in ("opt-30b", "olmo2-32b") else 400 for m in params}
    ft = sum(12 * 4 * p * 1e9 * tokens / (tput[m] * 1e12) / 3600 for m, p in params.items())
    assert w["rules"]["finetune"]["gpu_hours"] == pytest.approx(ft)
    # evaluate: 2 FLOP per parameter and token, 1,000 examples x 128 tokens, 12 runs x 21 checkpoints x 8 testsets
    ev = sum(12 * 21 * 8 * 2 * p * 1e9 * 1000 * 128 / (tput[m] * 1e12) / 3600 for m, p in params.items())
    assert w["rules"]["evaluate"]["gpu_hours"] == pytest.approx(ev)
    assert w["gpu_hours"] == pytest.approx(ft + ev)
    # what the limits assume: the work over the GPU-seconds they reserve (evaluate: 3,091.2 GPU-hours)
    flop = sum(12 * 21 * 8 * 2 * p * 1e9 * 1000 * 128 for p in params.values())
    assert w["rules"]["evaluate"]["implied_tflops"] == pytest.approx(flop / (3091.2 * 3600) / 1e12)
    # sizes unknown: the evaluations have no estimate, and the total says so by being None
    w = budget.work(plan, {"": 400.0})
    assert w["gpu_hours"] is None and w["rules"]["evaluate"]["jobs_unknown"] == 16128
    with pytest.raises(ValueError, match="must be positive"):
        budget.parse_throughput(["0"])


def test_budget_command_adds_the_work_beside_the_limits(tmp_path, capsys):
    paper = str(REPO / "config/paper.yaml")
    args = ["budget", "--configfile", paper, "--out", str(tmp_path / "b")]
    assert main([*args, "--throughput", "400", "--examples", "1000"]) == 0
    printed = capsys.readouterr().out
    assert "**GPU-hours from the work**" in printed and "| finetune | 96 |" in printed
    b = json.loads((tmp_path / "b.json").read_text())
    assert b["totals"]["gpu_hours"] == 4819.2 and b["work"]["gpu_hours"] < b["totals"]["gpu_hours"]
    # without --throughput the budget is as it was: no work section
    assert main(args) == 0
    assert "from the work" not in capsys.readouterr().out


def test_the_grid_of_the_paper_and_its_changes():
    paper = REPO / "config/paper.yaml"
    raw = read_config(paper)
    plan = load(read_config(paper), REPO, [paper])
    g = grid.grid_of(plan)
    # 8 models, 3 seeds per n_train, 21 checkpoints; each in-domain set has 7 OOD testsets: 21 pairs
    assert (g["models"], g["runs"], g["checkpoints"], g["pairs"], g["tables"]) == (8, 3, 21, 21, 4)
    # the in-domain sets' sizes, like the OOD sets', unknown before their data is prepared
    assert g["in_domain_sizes"] == {"mnli": None, "snli": None} and len(g["sizes"]) == 8
    cfg, _ = grid.change("checkpoints x2", raw, plan)
    assert cfg["finetune"]["checkpoints"] == {"every": 25} and raw["finetune"]["checkpoints"] == {"every": 50}
    cfg, _ = grid.change("models +50%", raw, plan)
    assert [m["name"] for m in cfg["models"][8:]] == [
        "opt-2.7b-copy",
        "opt-13b-copy",
        "olmo2-7b-copy",
        "olmo2-32b-copy",
    ]
    with pytest.raises(ValueError, match="used whole"):
        grid.change("examples x4", raw, plan)


def test_the_workflows_scores_table_as_csv_is_the_same_pilot_as_its_parquet(tmp_path):
    # a CSV's columns are read as text: the testsets' sizes (its n column) must still count as numbers
    rng = np.random.default_rng(8)
    rows = []
    for seed in range(3):
        base = np.cumsum(rng.normal(0.01, 0.01, 8))
        for step in range(8):
            for testset, role, n in (("synth-test", "in-domain", 200), ("a", "ood", 300), ("b", "ood", 400)):
                acc = 0.5 + base[step] + 0.01 * rng.normal()
                rows.append(
                    {
                        "model": "m",
                        "in_domain": "synth-test",
                        "n_train": 64,
                        "seed": seed,
                        "run_id": f"m/synth-test/n64/seed{seed}",
                        "step": 10 * step,
                        "testset": testset,
                        "role": role,
                        "accuracy": acc,
                        "n": n,
                    }
                )
    scores = pd.DataFrame(rows)
    scores.to_csv(tmp_path / "scores.csv", index=False)
    scores.to_parquet(tmp_path / "scores.parquet", index=False)
    pilots = {}
    for suffix in ("csv", "parquet"):
        out = tmp_path / suffix
        args = ["design", "--configfile", str(MICRO), "--pilot", str(tmp_path / f"scores.{suffix}"), "--out", str(out)]
        assert main([*args, "--studies", "20", "--no-items-table", "--no-alternatives", "--no-figure"]) == 0
        pilots[suffix] = json.loads(out.with_suffix(".json").read_text())["pilot"]
    sizes = {t: v["items"] for t, v in pilots["csv"]["items"]["per_testset"].items()}
    assert sizes == {"synth-test": 200, "a": 300, "b": 400}
    assert pilots["csv"] == pilots["parquet"]
