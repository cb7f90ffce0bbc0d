"""The design report's verdict on a grid whose prediction interval cannot reach the target
(oodcorr.analysis.design.report.generalises_unreachable)."""

from oodcorr.analysis.design.report import generalises_unreachable


def _row(name, smallest, gpu_hours):
    return {"name": name, "smallest_effect_80": {"generalises": smallest}, "cost": {"gpu_hours": gpu_hours}}


def test_a_reachable_grid_gets_no_note():
    assert generalises_unreachable([_row("as configured", 0.4, 10)], 0.8, 0.9) is None


def test_the_cheapest_change_that_reaches_the_target_is_named():
    rows = [
        _row("as configured", None, 10),
        _row("seeds +2", 0.5, 30),
        _row("models +50%", 0.6, 20),
        _row("checkpoints x2", None, 15),
        _row("unpriced", 0.3, None),
    ]
    got = generalises_unreachable(rows, 0.8, 0.9)
    assert got == {"largest_effect": 0.9, "target": 0.8, "fix": "models +50%", "fix_smallest_effect": 0.6}
    assert generalises_unreachable(rows[:1] + rows[3:4], 0.8, 0.9)["fix"] is None
