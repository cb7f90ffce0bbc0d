"""Corrections for many tests (oodcorr.analysis.multitest): Holm and Benjamini-Hochberg against statsmodels."""

import math

import numpy as np
import pytest

from oodcorr.analysis import (
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
