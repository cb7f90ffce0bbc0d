"""How many items each testset needs for a design's claims: the items table of ``oodcorr design``."""

from __future__ import annotations

import math
from dataclasses import asdict, replace

import numpy as np

from ..simulate.items import disagreement
from .power import Assumptions, Curve, se_of


def share_text(p) -> str:
    """A share as the report prints it: two decimals, ``n/a`` for None or NaN."""
    return "n/a" if p is None or (isinstance(p, float) and not math.isfinite(p)) else f"{p:.2f}"


_f = share_text

# the sizes the items table simulates for the in-domain set and for the OOD sets (beside the config's
# own and none: infinitely many items)
LADDER = (100, 300, 1000, 3000, 10000, 30000)
# the claims whose items it counts: the sign on average and in nearly every model (at the effect of
# interest) and near zero (at effect 0)
ITEM_CLAIMS = ("average sign", "generalises", "near zero")
ITEM_SIDES = {"in_domain": "the in-domain set", "ood": "each OOD set of the pair"}
# besides the target power: the fewest items that keep this share of what infinitely many items give
# (a claim the grid finds rarely still loses to the noise), read where that power is at least
KEEP = 0.9
KEEP_FROM = 0.1


def ladder_assumptions(a: Assumptions) -> list[tuple[str, int | None, Assumptions]]:
    """The items table's studies: (side, size, assumptions) for each size of :data:`LADDER`, ascending."""
    return [
        (side, n, replace(a, items=replace(a.items, **{side: n})))
        for side in ITEM_SIDES
        for n in [*sorted(set(LADDER) | ({getattr(a.items, side)} - {None})), None]
    ]


def smallest_items(sizes, power, target: float) -> dict:
    """The fewest items at which ``power`` (along ``sizes`` ascending, the last None: no noise) reaches ``target``."""
    finite = [(n, p) for n, p in zip(sizes, power) if n is not None]
    out = {"items": None, "how": "never", "without_noise": float(power[-1])}
    for i, (n, p) in enumerate(finite):
        if p >= target:
            if i == 0:
                return {**out, "items": int(n), "how": "at most"}
            n0, p0 = finite[i - 1]
            frac = (target - p0) / (p - p0) if p > p0 else 1.0
            est = math.exp(math.log(n0) + frac * (math.log(n) - math.log(n0)))
            return {**out, "items": int(math.ceil(est)), "how": "about"}
    if power[-1] >= target:
        return {**out, "items": int(finite[-1][0]), "how": "more than"}
    return out


def items_needed(ladder, steps: list[Curve], head: Curve, effect: float, target: float, testset_sizes: dict) -> dict:
    """The items table (JSON-ready): per side each claim's power at each size and the smallest reaching ``target``."""
    sides: dict = {}
    for (side, n, _), c in zip(ladder, steps):
        s = sides.setdefault(side, {"sizes": [], "power": {k: [] for k in (*ITEM_CLAIMS, "false sign")}})
        s["sizes"].append(n)
        # a curve of the effects (0, effect): the signs at the effect, near zero at 0, a false sign at 0
        s["power"]["average sign"].append(float(c.power["average sign"][-1]))
        s["power"]["generalises"].append(float(c.power["generalises"][-1]))
        s["power"]["near zero"].append(float(c.near_zero[0]))
        s["power"]["false sign"].append(float(c.power["average sign"][0]))
        s["studies"] = c.studies
    for side, s in sides.items():
        s["se"] = {k: [se_of(p, s["studies"]) for p in v] for k, v in s["power"].items()}
        s["smallest"] = {k: smallest_items(s["sizes"], s["power"][k], target) for k in ITEM_CLAIMS}
        s["keeping"] = {
            k: smallest_items(s["sizes"], s["power"][k], KEEP * s["power"][k][-1])
            if s["power"][k][-1] >= KEEP_FROM
            else None
            for k in ITEM_CLAIMS
        }
        s["others"] = asdict(ladder[[x[0] for x in ladder].index(side)][2].items)
    at = {k: float(np.interp(effect, head.effects, head.power[k])) for k in ("average sign", "generalises")}
    at["near zero"] = float(head.near_zero[head.effects.index(0.0)]) if 0.0 in head.effects else math.nan
    per_testset = {}
    for side, names in (testset_sizes or {}).items():
        s = sides.get(side)
        if not s:
            continue
        fin = [(n, i) for i, n in enumerate(s["sizes"]) if n is not None]
        logs = np.log([n for n, _ in fin])
        for name, n in sorted(names.items()):
            if not n:
                continue
            per_testset[name] = {
                "side": side,
                "items": int(n),
                # below the smallest size simulated the power is read there: at most that
                "below_simulated": bool(n < fin[0][0]),
                "power": {
                    k: float(np.interp(math.log(n), logs, [s["power"][k][i] for _, i in fin])) for k in ITEM_CLAIMS
                },
            }
    return {
        "effect": float(effect),
        "target": float(target),
        "studies": int(steps[0].studies) if steps else 0,
        "claims": list(ITEM_CLAIMS),
        "as_configured": at,
        "sides": sides,
        "testsets": per_testset,
    }


def no_item_noise(items: dict) -> bool:
    return items["in_domain"] is None and items["ood"] is None


def _n(n) -> str:
    return "no item noise (infinitely many items)" if n is None else f"{n:,} items"


def item_noise_words(items: dict) -> str:
    """The item noise of :class:`.items.ItemNoise` (as a dict) in words."""
    if no_item_noise(items):
        return "none (every testset infinitely large)"
    # the share of items two neighbouring checkpoints answer differently at the OOD sets' accuracy
    disagree = disagreement(items["accuracy"], items["difficulty"] + (1 - items["difficulty"]) * items["persistence"])
    return (
        f"the in-domain set {_n(items['in_domain'])}, each OOD set {_n(items['ood'])}, the same items at every "
        f"checkpoint; an item's deviation persists with AR(1) coefficient {items['persistence']:.3g} (its own "
        f"difficulty {items['difficulty']:.3g} of it), so neighbouring checkpoints disagree on "
        f"{disagree:.0%} of an OOD set's items at its accuracy {items['accuracy']:.2f}; the OOD "
        f"residual series' sd {items['residual_sd']:.3g} in score units"
    )


def _items_cell(sm: dict) -> str:
    sign = {"at most": "≤", "about": "≈", "more than": ">"}.get(sm["how"])
    return f"{sign} {sm['items']:,}" if sign else f"not by items ({_f(sm['without_noise'])} without item noise)"


ITEM_SHORT = {"average sign": "sign on average", "generalises": "sign in nearly every model", "near zero": "near zero"}


def items_markdown(it: dict, phi: float) -> list[str]:
    """The items table of the report (:func:`items_needed`'s dict) as markdown lines."""
    claims = it["claims"]
    at = it["as_configured"]
    lines = [
        "",
        f"## How many items (phi {phi:g}; the signs at effect {it['effect']:g}, near zero at effect 0)",
        "",
        f"The power of each claim as the in-domain set's items change (the OOD sets as configured) and as each OOD "
        f"set's items change (the in-domain set as configured), and the fewest items that reach {it['target']:.0%} "
        "(interpolated on the log of the size between the simulated sizes; *not by items*: not even infinitely "
        "large testsets reach it, the grid is what limits the claim); beside it, the fewest items that keep "
        f"{KEEP:.0%} of the power infinitely large testsets give (n/a where that power is below {KEEP_FROM:g}). "
        "*A sign at 0*: a sign stated when every model's correlation is 0 (a false statement). Each power: a "
        f"share of {it['studies']:,} simulated studies, ± its Monte Carlo standard error.",
        "",
        f"| claim | as configured | in-domain set: items for {it['target']:.0%} | each OOD set: items for "
        f"{it['target']:.0%} | in-domain set: items keeping {KEEP:.0%} of the noise-free power | each OOD set: "
        f"the same |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for k in claims:
        keep = [it["sides"][side]["keeping"][k] for side in ("in_domain", "ood")]
        lines.append(
            f"| {ITEM_SHORT[k]} | {_f(at[k])} | {_items_cell(it['sides']['in_domain']['smallest'][k])} | "
            f"{_items_cell(it['sides']['ood']['smallest'][k])} | "
            + " | ".join("n/a (too rare)" if x is None else _items_cell(x) for x in keep)
            + " |"
        )
    for side, words in (("in_domain", "in-domain set"), ("ood", "each OOD set")):
        s = it["sides"][side]
        other = s["others"]["ood"] if side == "in_domain" else s["others"]["in_domain"]
        lines += [
            "",
            f"Items of {words} ({'each OOD set' if side == 'in_domain' else 'the in-domain set'}: {_n(other)}):",
            "",
            "| items | " + " | ".join(ITEM_SHORT[k] for k in claims) + " | a sign at 0 |",
            "| ---: | " + " | ".join("---:" for _ in claims) + " | ---: |",
        ]
        for i, n in enumerate(s["sizes"]):
            cells = [f"{_f(s['power'][k][i])} ± {s['se'][k][i]:.2f}" for k in (*claims, "false sign")]
            lines.append(f"| {'∞ (none)' if n is None else f'{n:,}'} | " + " | ".join(cells) + " |")
    if it["testsets"]:
        lines += ["", "At the config's testsets' sizes (interpolated):", ""]
        for name, t in it["testsets"].items():
            role = "in-domain set" if t["side"] == "in_domain" else "OOD set, in a pair of two of its size"
            at_most = "at most " if t["below_simulated"] else ""
            lines.append(
                f"* {name} ({t['items']:,} items, {role}): "
                + ", ".join(f"{ITEM_SHORT[k]} {at_most}{_f(t['power'][k])}" for k in claims)
                + (" (fewer items than the smallest size simulated: read there)" if at_most else "")
            )
    return lines
