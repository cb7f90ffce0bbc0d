"""How many items each testset needs (oodcorr.analysis.design.report): the fewest items reaching the
target along the simulated sizes, the sizes simulated, and the table on a small grid."""

import math

import pytest

from oodcorr.analysis.design import power as dz
from oodcorr.analysis.design.power import ItemNoise
from oodcorr.analysis.design.report import LADDER, ladder_assumptions, markdown, report, smallest_items


def test_the_fewest_items_are_read_on_the_log_of_the_size():
    sizes = [100, 1000, 10000, None]
    # 0.8 crossed halfway (in log) between 100 and 1,000: about 316
    got = smallest_items(sizes, [0.6, 1.0, 1.0, 1.0], 0.8)
    assert got["how"] == "about" and got["items"] == math.ceil(10**2.5)
    assert smallest_items(sizes, [0.9, 1.0, 1.0, 1.0], 0.8) == {"items": 100, "how": "at most", "without_noise": 1.0}
    # only infinitely many items reach it
    assert smallest_items(sizes, [0.1, 0.2, 0.5, 0.85], 0.8)["how"] == "more than"
    # not even they: the grid limits the claim
    assert smallest_items(sizes, [0.1, 0.2, 0.3, 0.4], 0.8) == {"items": None, "how": "never", "without_noise": 0.4}


def test_the_sizes_simulated_hold_the_configs_own_and_none():
    a = dz.Assumptions(items=ItemNoise(in_domain=277, ood=None))
    got = ladder_assumptions(a)
    ids = [n for side, n, _ in got if side == "in_domain"]
    oods = [n for side, n, _ in got if side == "ood"]
    assert ids == sorted(set(LADDER) | {277}) + [None] and oods == list(LADDER) + [None]
    # each side changes only its own testsets
    assert all(x.items.ood is None for side, _, x in got if side == "in_domain")
    assert all(x.items.in_domain == 277 for side, _, x in got if side == "ood")


def test_the_items_table_of_a_small_grid():
    g = dz.Grid(6, 1, 15, 1)  # straight series and the line, whose form the cross-fitted correlation has
    a = dz.Assumptions(phi=0.5, items=ItemNoise(in_domain=1000, ood=300), shape="line")
    rep = report(
        g,
        a,
        [0.5],
        dz.Settings(residualiser="linear"),
        dz.Draws((0.0, 0.5), 60),
        effect=0.5,
        info={"testset_sizes": {"in_domain": {"mnli": 1000}, "ood": {"wnli": 71, "hans": 30000}}},
    )
    it = rep["items"]
    assert it["sides"]["ood"]["sizes"] == [*LADDER, None] and it["sides"]["in_domain"]["sizes"] == [*LADDER, None]
    p = it["sides"]["ood"]["power"]["average sign"]
    assert p[0] < p[-1]  # 100 items per OOD set find less than infinitely many
    # the config's own sizes are simulated on their side: the table's cell equals the curve as configured
    head = rep["curves"][0]
    i = it["sides"]["ood"]["sizes"].index(300)
    assert p[i] == pytest.approx(head["power"]["average sign"][1])
    # a testset below the smallest size simulated reads as the smallest
    assert it["testsets"]["wnli"]["power"]["average sign"] == pytest.approx(p[0])
    assert it["testsets"]["wnli"]["below_simulated"] and not it["testsets"]["hans"]["below_simulated"]
    assert set(it["testsets"]) == {"mnli", "wnli", "hans"}
    keep = it["sides"]["ood"]["keeping"]["average sign"]  # 90 % of what infinitely many items find
    assert keep["how"] in ("at most", "about", "more than") and it["studies"] == 60
    text = markdown(rep)
    assert "## How many items" in text and "| ∞ (none) |" in text and "wnli (71 items, OOD set" in text
    assert "sign on average at most" in text and "keeping 90% of the noise-free power" in text
