"""The agreement table's answer where the scores are measurements (oodcorr.analysis.across.agreement_table)."""

import numpy as np
import pandas as pd

from oodcorr.analysis import Options, agreement, analyse
from oodcorr.analysis.pipeline import pool
from oodcorr.analysis.simulate.items import fast_run_rows, item_runs


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


def _curved_study(seed: int, models: int = 8, steps: int = 40, rho: float = 0.0) -> pd.DataFrame:
    """Each model's OOD scores follow the in-domain score along logistic curves of their own (a late
    emergence or an early plateau), plus AR(1) noise whose innovations correlate ``rho`` between
    ood0 and ood1 (ood2 independent): the partial correlation given the ability is ``rho``."""
    rng = np.random.default_rng(seed)
    rows = []
    t = np.arange(steps)
    cov = np.array([[1.0, rho, 0.0], [rho, 1.0, 0.0], [0.0, 0.0, 1.0]])
    for m in range(models):
        z = 0.4 + 0.45 / (1 + np.exp(-(t - rng.uniform(8, 30)) / rng.uniform(3, 8)))
        inn = rng.multivariate_normal(np.zeros(3), cov, size=steps)
        e = np.zeros((steps, 3))
        for i in range(steps):
            e[i] = (0.5 * e[i - 1] if i else 0) + np.sqrt(0.75) * inn[i]
        for k in range(3):
            f = 0.3 + 0.4 / (1 + np.exp(-(z - rng.uniform(0.5, 0.8)) * rng.uniform(10, 40)))
            rows += [(f"m{m}", "id", "r0", i, f"ood{k}", f[i] + 0.01 * e[i, k]) for i in range(steps)]
        rows += [(f"m{m}", "id", "r0", i, "id", z[i]) for i in range(steps)]
    return pd.DataFrame(rows, columns=["model", "in_domain", "run", "unit", "testset", "score"])


def test_the_line_fakes_models_differ_on_curves_and_the_answer_says_it_depends_on_the_form():
    from oodcorr.core.answer import DEPENDS_ON_FORM, answer_lines

    long = _curved_study(1)
    line = agreement(analyse(long, Options(residualisers=("linear",), example_boot=0, pool_by=())))
    curve = agreement(analyse(long, Options(example_boot=0, pool_by=())))  # the default: the spline
    assert set(curve["residualiser"]) == {"spline"}
    # no pair's tasks correlate: the line calls most pairs "models differ", the curve states nothing
    claims = line["verdict"].str.contains("differ|reversal|positive|negative")
    assert claims.sum() >= 2
    assert not curve["verdict"].str.contains("differ|reversal|positive|negative").any()
    # the curve's rows carry the line's verdict (the same ladder on the line's cells), and the word
    # where the line states what the curve does not
    assert list(curve["line_verdict"]) == list(line["verdict"])
    assert list(curve["form"] == DEPENDS_ON_FORM) == list(claims) and (line["form"] == "").all()
    (said,) = answer_lines(curve.to_dict("records"), "pearson", "spline", "out", [])
    assert f"; {claims.sum()} depend on the form (the straight line states otherwise: line_verdict)" in said
