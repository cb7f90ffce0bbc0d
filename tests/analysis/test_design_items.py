"""The item noise of the design's simulated studies (oodcorr.analysis.design.power): its draws have the
item model's covariance, each run is measured and each study answered as the workflow does it
(checked against agreement() on the same runs), and the in-domain set's noise fakes the observed
sign but not the answer's."""

import numpy as np
import pandas as pd
import pytest

from oodcorr.analysis import Options, agreement
from oodcorr.analysis.design import power as dz
from oodcorr.analysis.design.power import ItemNoise, measure_runs, noisy_runs
from oodcorr.analysis.pipeline import pool
from oodcorr.analysis.simulate.items import fast_run_rows, item_noise_covariance
from oodcorr.analysis.simulate.runs import run_scores


def _study_runs(items: ItemNoise, rho: float, studies: int, models: int, runs: int, T: int, seed: int):
    rng = np.random.default_rng(seed)
    truth = run_scores(rng, np.full(studies * models * runs, rho), T, 0.8, noise=dz.NOISE)
    d = noisy_runs(truth, items, dz.NOISE / items.residual_sd, rng)
    return d, {k: v.reshape(studies, models, runs) for k, v in measure_runs(d).items()}


@pytest.mark.parametrize(
    "items, rho",
    [
        (ItemNoise(in_domain=200, ood=300), 0.0),
        (ItemNoise(in_domain=200, ood=100), 0.5),
        (ItemNoise(in_domain=1000, ood=3000, persistence=0.3), -0.5),
        (ItemNoise(in_domain=None, ood=71), 0.3),
    ],
)
def test_the_measured_answer_equals_agreement_on_the_same_runs(items, rho):
    S, M, K, T = 40, 6, 2, 21
    d, runs = _study_runs(items, rho, S, M, K, T, seed=5)
    res = dz.studies_of(runs, dz.Settings())
    words = dz.verdicts_of(res, res, dz.Grid(M, K, T, 1), dz.Assumptions(items=items), dz.Settings(), None)
    opts = Options(pool_by=(), example_boot=0)
    rows = fast_run_rows(d, M, K)  # the analysis' own columns of the same runs, one study per in-domain set
    table = pd.concat([rows, pool(rows, opts).assign(significant=False)], ignore_index=True)
    ag = agreement(table, opts.alpha, opts.agreement_correction, opts.level, opts.near_zero)
    ag = ag.assign(study=ag["in_domain"].str[1:].astype(int)).sort_values("study")
    assert words == ag["verdict"].tolist()
    np.testing.assert_allclose(np.tanh(res["z"]), ag["r_consensus_eiv"].to_numpy(float), rtol=1e-9)
    band = np.where(ag["attenuation_low"].isna(), 1.0, ag["attenuation_low"])
    np.testing.assert_allclose(res["band"], band, rtol=1e-9)
    assert res["items"].all()


def test_the_draws_carry_the_item_models_noise_and_independent_halves():
    T, n = 8, 300
    items = ItemNoise(in_domain=None, ood=n, persistence=0.6, difficulty=0.3, accuracy=0.7, residual_sd=0.02)
    truth = np.zeros((20000, T, 3)) + 0.5
    d = noisy_runs(truth, items, 1.0, np.random.default_rng(0), splits=2)
    want = item_noise_covariance(np.full(T, 0.7), n, 0.3, 0.6)
    whole = d["scores"][:, :, 1] - 0.5
    np.testing.assert_allclose(np.cov(whole.T), want, atol=0.06 * want[0, 0])
    # the two halves of n // 2 items: each carries the noise of its own size, and they average to the whole
    for h in (0, 1):
        half = d["halves"][:, 0, h, :, 1] - 0.5
        np.testing.assert_allclose(np.cov(half.T), 2 * want, atol=0.12 * want[0, 0])
    np.testing.assert_allclose(d["halves"][:, :, :, :, 1].mean(2), np.repeat(d["scores"][:, None, :, 1], 2, 1))
    # their difference is independent of the whole and of the other halving's
    diff = d["halves"][:, :, 0, :, 1] - d["halves"][:, :, 1, :, 1]
    assert abs(np.corrcoef(diff[:, 0, 0], whole[:, 0])[0, 1]) < 0.03
    assert abs(np.corrcoef(diff[:, 0, 0], diff[:, 1, 0])[0, 1]) < 0.03
    # a testset without noise is the truth, at every halving; the in-domain set here
    assert np.array_equal(d["scores"][:, :, 0], truth[:, :, 0]) and np.all(d["halves"][..., 0] == 0.5)


def test_the_in_domain_sets_noise_fakes_the_observed_sign_but_not_the_answers():
    # every model's tasks uncorrelated, 12 models, an in-domain set of 200 items: the ladder on the observed
    # correlations states a sign in most studies (the OOD sets load 0.8 and -0.4 on the in-domain ability,
    # which the noisy in-domain score leaves in both residuals); the answer, on the cross-fitted ones, does not
    g = dz.Grid(12, 1, 25, 1)
    a = dz.Assumptions(phi=0.5, items=ItemNoise(in_domain=200, ood=30000))
    runs = dz.simulate_runs(g, a, 0.0, 300, np.random.default_rng(3))
    res = dz.studies_of(runs, dz.Settings())
    words = dz.verdicts_of(res, res, g, a, dz.Settings(), None)
    observed = dz.studies_of({k: v for k, v in runs.items() if k in ("r", "se_z", "p")}, dz.Settings())
    said = dz.verdicts_of(observed, observed, g, a, dz.Settings(), None)
    sign = np.mean([w.startswith(("positive", "negative")) for w in words])
    faked = np.mean([w.startswith("negative") for w in said])
    assert faked > 0.5 and sign <= 0.05 + 2 * np.sqrt(0.05 * 0.95 / 300), (faked, sign)


def test_huge_testsets_answer_as_the_design_without_item_noise():
    # a billion items per testset: the measured path (cross-fitted, reliabilities) gives the verdicts the
    # noise-free design gives, study by study (the same draws of the tasks)
    # (the cross-fitted correlation is the line's: the noise-free design it equals is the line's too)
    g, linear = dz.Grid(6, 2, 21, 1), dz.Settings(residualiser="linear")
    huge = dz.Assumptions(phi=0.5, items=ItemNoise(in_domain=10**9, ood=10**9))
    plain = dz.Assumptions(phi=0.5)
    got = {}
    for name, a in (("huge", huge), ("plain", plain)):
        runs = dz.simulate_runs(g, a, 0.4, 200, np.random.default_rng(8), linear)
        res = dz.studies_of(runs, dz.Settings())
        got[name] = dz.verdicts_of(res, res, g, a, dz.Settings(), None)
        if name == "plain":
            assert "r_eiv" not in runs
    same = np.mean([a == b for a, b in zip(got["huge"], got["plain"])])
    assert same >= 0.98 and len(set(got["plain"])) > 1


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"ood": 3}, "items of the ood set: 4 or more"),
        ({"in_domain": 10.5}, "items of the in-domain set"),
        ({"persistence": 1.0}, "persistence must lie in [0, 1)"),
        ({"accuracy": 1.0}, "strictly between 0 and 1"),
        ({"residual_sd": 0.0}, "must be positive"),
    ],
)
def test_an_impossible_item_noise_is_refused_by_name(kwargs, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace(")", r"\)").replace("(", r"\(")):
        ItemNoise(**kwargs)


def test_more_items_buy_back_the_power_the_noise_takes():
    g = dz.Grid(8, 1, 21, 1)
    power = []
    for n in (100, 1000, None):  # straight series and the line, whose form the cross-fitted correlation has
        a = dz.Assumptions(phi=0.5, items=ItemNoise(in_domain=1000, ood=n), shape="line")
        c = dz.curve(g, a, dz.Settings(residualiser="linear"), dz.Draws((0.0, 0.5), 300, 4))
        power.append(c.power["average sign"][1])
    assert power[0] < power[1] < power[2] and power[2] - power[0] > 0.3, power
