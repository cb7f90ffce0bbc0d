"""What a pilot says about its item noise (oodcorr.analysis.design.pilot): the persistence fitted
to per-item correctness whose item model is known, the stationary sd of a residual series, and the
estimates of a pilot simulated item by item."""

import numpy as np
import pytest

from oodcorr.analysis.cell.residualise import linear_maker
from oodcorr.analysis.design import pilot as design_pilot
from oodcorr.analysis.design.pilot import fit_persistence, lag_correlations, stationary_sd
from oodcorr.analysis.simulate.items import answer_items, item_table


@pytest.mark.parametrize("difficulty, persistence", [(0.5, 0.8), (0.2, 0.3), (0.7, 0.93)])
def test_the_persistence_of_a_known_item_model_is_found(difficulty, persistence):
    # one testset of 4,000 items answered at 16 checkpoints, 6 runs (difficulties shared): the noise's
    # correlation by lag, fitted by the model's
    T = 16
    acc = np.full((6, T), 0.7)
    mats = answer_items(np.random.default_rng(1), acc, 4000, difficulty, persistence)
    corr = np.zeros(T - 1)
    weight = np.zeros(T - 1)
    for m in mats:
        c, w = lag_correlations(m)
        corr += c * w
        weight += w
    d, p = fit_persistence(corr / weight, weight, 0.7)
    # over 16 checkpoints the two parameters trade off (0.6, 0.95 and 0.7, 0.93 give lag correlations
    # within 0.02 of each other): what is found is the correlation of the items' w at every lag
    lags = np.arange(1, T)
    assert np.allclose(d + (1 - d) * p**lags, difficulty + (1 - difficulty) * persistence**lags, atol=0.04), (d, p)


def test_a_residuals_sample_sd_is_brought_to_the_stationary_series_sd():
    # AR(1) series of sd 0.02 (coefficient 0.8), 21 checkpoints, residuals on an intercept and the curve
    T, phi = 21, 0.8
    rng = np.random.default_rng(2)
    e = np.empty((4000, T))
    e[:, 0] = rng.normal(size=4000)
    for k in range(1, T):
        e[:, k] = phi * e[:, k - 1] + np.sqrt(1 - phi * phi) * rng.normal(size=4000)
    t = np.arange(T)
    R = linear_maker((1 - np.exp(-t / (T / 4)))[:, None])
    res = 0.02 * e @ R.T
    sample = float(np.sqrt(np.mean(np.sum(res**2, 1) / (T - 2))))
    assert sample < 0.016  # the residuals keep well under the series' variance
    assert stationary_sd(sample, phi, T) == pytest.approx(0.02, rel=0.03)
    assert stationary_sd(sample, 0.0, T) == pytest.approx(sample * np.sqrt((T - 2) / np.trace(R)), rel=1e-9)


def test_a_pilot_with_per_item_correctness_gives_its_sizes_persistence_and_residual_sd():
    # 4 models x 3 runs x 21 checkpoints, items known: in-domain 1,000, OOD sets 400; the item model
    # (difficulty 0.5, persistence 0.8) and the tasks' residual sd (0.02) known
    long, items = item_table(np.random.default_rng(4), [0.3, 0.3, 0.0, 0.3], 3, 21, (1000, 400, 400), phi=0.5)
    est = design_pilot.pilot_estimates(long, n_boot=30, examples=items)
    it = est["items"]
    assert it["in_domain_items"] == 1000 and it["ood_items"] == 400
    assert it["persistence"] == pytest.approx(0.8, abs=0.1) and it["difficulty"] == pytest.approx(0.5, abs=0.15)
    assert set(it["per_testset"]) == {"in-domain", "ood0", "ood1"}
    assert it["per_testset"]["ood0"]["disagreement"] == pytest.approx(0.13, abs=0.04)
    assert it["residual_sd"] == pytest.approx(0.02, rel=0.3)
    assert not [n for n in est["notes"] if "persistence" in n or "residual" in n]
    # the design simulates what it found
    noise = design_pilot.pilot_noise(it)
    assert (noise.in_domain, noise.ood, noise.persistence) == (1000, 400, it["persistence"])
    # with its sizes only: the default persistence (said so), the residual sd from the bound's low end
    est = design_pilot.pilot_estimates(long, sizes={"in-domain": 1000, "ood0": 400, "ood1": 400}, n_boot=30)
    assert est["items"]["persistence"] is None and est["items"]["ood_items"] == 400
    assert est["items"]["residual_sd"] < 0.8 * it["residual_sd"]  # the bound over-states the noise: cautious
    assert any("persistence of the item noise is not estimated" in n for n in est["notes"])
