"""The agreement table's answer where the scores are measurements (oodcorr.analysis.agreement_table)."""

import numpy as np
import pandas as pd

from oodcorr.analysis import Options, agreement
from oodcorr.analysis.pipeline import pool
from oodcorr.analysis.simulate_items import fast_run_rows, item_runs


def test_a_sign_on_average_is_the_sign_of_the_consensus_the_ladder_read():
    # the tasks correlate -0.5 in every model; the in-domain set has 200 items, whose noise leaves part of
    # the in-domain ability in both residuals: the observed consensus is pulled towards + (both OOD sets
    # load positively on it), the cross-fitted one (r_eiv, what the ladder reads) is not. A sign stated
    # must be r_eiv's: before the fix, 25 of these 40 studies said "positive on average" with a p-value
    # that r_eiv's negative consensus earned.
    OPTS = Options(pool_by=(), example_boot=0)
    d = item_runs(np.random.default_rng(1), [-0.5] * (40 * 12), 25, (200, 30000, 30000))
    rows = fast_run_rows(d, 12, 1)
    table = pd.concat([rows, pool(rows, OPTS).assign(significant=False)], ignore_index=True)
    ag = agreement(table, OPTS.alpha, OPTS.agreement_correction, OPTS.level, OPTS.near_zero)
    assert ((ag["r_consensus"] > 0) & (ag["r_consensus_eiv"] < 0)).sum() >= 20  # the case is there
    stated = ag["direction"].str.split(" ").str[0]
    sign = np.sign(ag["r_consensus_eiv"].to_numpy(float))
    said = stated.isin(["positive", "negative"]).to_numpy()
    assert said.sum() >= 20
    assert (stated[said] == np.where(sign[said] > 0, "positive", "negative")).all()
    assert not ag["verdict"].str.startswith("positive").any()
