"""Corrections for many tests (oodcorr.analysis.across.multitest): Holm and Benjamini-Hochberg against statsmodels."""

import math

import numpy as np
import pytest

from oodcorr.analysis.across.multitest import (
    adjust,
    bh,
    holm,
)


def test_holm_and_bh_match_statsmodels_and_skip_nans():
    multipletests = pytest.importorskip("statsmodels.stats.multitest").multipletests
    rng = np.random.default_rng(4)
    p = np.concatenate([rng.uniform(0, 0.05, 6), rng.uniform(0, 1, 14)])
    for mine, theirs in ((holm, "holm"), (bh, "fdr_bh")):
        assert np.allclose(mine(p), multipletests(p, method=theirs)[1], atol=1e-12)
    with_nan = np.array([0.01, np.nan, 0.04, 0.03])
    got = adjust(with_nan, "holm")
    assert math.isnan(got[1])
    assert np.allclose(got[[0, 2, 3]], multipletests(with_nan[[0, 2, 3]], method="holm")[1])
    # a hand-computed example: Holm (0.01, 0.04, 0.03) -> (0.03, 0.06, 0.06); BH -> (0.03, 0.04, 0.04)
    assert np.allclose(holm([0.01, 0.04, 0.03]), [0.03, 0.06, 0.06])
    assert np.allclose(bh([0.01, 0.04, 0.03]), [0.03, 0.04, 0.04])


def test_simes_is_the_smallest_bh_adjusted_p_of_each_family_and_skips_nans():
    from statsmodels.stats.multitest import multipletests

    from oodcorr.analysis.across.multitest import simes

    rng = np.random.default_rng(7)
    families = rng.uniform(0, 0.2, (40, 6)) ** 2
    families[::3, 4:] = np.nan  # families of 4 tests beside families of 6
    families[5] = np.nan  # and one without a test
    got = simes(families)
    for row, value in zip(families, got):
        p = row[np.isfinite(row)]
        if not len(p):
            assert math.isnan(value)
            continue
        by_hand = min(1.0, min(len(p) * q / j for j, q in enumerate(np.sort(p), start=1)))
        assert value == pytest.approx(by_hand, rel=1e-12)
        assert value == pytest.approx(multipletests(p, method="fdr_bh")[1].min(), rel=1e-12)
    assert simes(families[0]) == got[0]  # one family as a 1-D array
