"""The report of ``oodcorr design`` (:func:`report`, a JSON-ready dict; :func:`markdown`): the power curves, the
alternatives with their cost, how many items each testset needs; a pilot's estimates come in through ``info``."""

from __future__ import annotations

import math
from dataclasses import asdict, replace

import numpy as np

from ..simulate.items import disagreement
from .power import POWER_LABELS, VERDICT_POWERS, Assumptions, Curve, Draws, Grid, Settings, curves, se_of


def _f(p) -> str:
    """A share as the report prints it: two decimals, ``n/a`` for None or NaN."""
    return "n/a" if p is None or (isinstance(p, float) and not math.isfinite(p)) else f"{p:.2f}"


# the sizes the items table simulates for each side (beside the config's own and none: infinitely many items)
LADDER = (100, 300, 1000, 3000, 10000, 30000)
# the claims whose items it counts: the signs at the effect of interest, near zero at effect 0
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


def _items_needed(ladder, steps: list[Curve], head: Curve, effect: float, target: float, testset_sizes: dict) -> dict:
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


def _n(n) -> str:
    return "no item noise (infinitely many items)" if n is None else f"{n:,} items"


def _items_cell(sm: dict) -> str:
    sign = {"at most": "≤", "about": "≈", "more than": ">"}.get(sm["how"])
    return f"{sign} {sm['items']:,}" if sign else f"not by items ({_f(sm['without_noise'])} without item noise)"


ITEM_SHORT = {"average sign": "sign on average", "generalises": "sign in nearly every model", "near zero": "near zero"}


def _at(c: Curve, kind: str, effect: float) -> tuple[float, float]:
    """(power, its standard error) of ``kind`` at ``effect``, interpolated between simulated effects."""
    p = float(np.interp(effect, c.effects, c.power[kind]))
    return p, se_of(p, c.studies * (c.grid.models * c.grid.runs if kind.startswith("cell") else 1))


def report(
    grid: Grid,
    a: Assumptions,
    phis,
    settings: Settings = Settings(),
    draws: Draws = Draws(),
    *,
    alternatives=(),
    effect: float = 0.3,
    target: float = 0.8,
    info: dict | None = None,
    items_studies: int | None = None,
) -> dict:
    """Everything ``oodcorr design`` writes, as a JSON-ready dict."""
    headline, studies, info = a.phi, draws.studies, info or {}
    phis = sorted({round(float(p), 4) for p in phis} | {round(float(headline), 4)})
    tasks = [(grid, replace(a, phi=p), settings, draws) for p in phis]
    alts = list(alternatives)
    tasks += [(x["grid"], replace(a, items=x["items"]), settings, draws) for x in alts]
    items_table = items_studies != 0
    ladder = ladder_assumptions(a) if items_table else []
    rungs = replace(draws, effects=(0.0, float(effect)), studies=items_studies or studies)
    tasks += [(grid, la, settings, rungs) for _, _, la in ladder]
    done = curves(tasks, draws.workers)
    base, steps = done[: len(phis)], done[len(phis) + len(alts) :]
    head = base[phis.index(round(float(headline), 4))]
    configured = {"name": "as configured", "description": "the config's grid", "grid": grid, "items": a.items}
    configured["cost"] = info.get("cost", {})
    rows = []
    for x, c in zip([configured, *alts], [head, *done[len(phis) : len(phis) + len(alts)]]):
        rows.append(
            {
                "name": x["name"],
                "description": x["description"],
                "grid": asdict(x["grid"]),
                "items": asdict(x["items"]),
                "cost": x.get("cost", {}),
                "power_at_effect": {k: dict(zip(("power", "se"), _at(c, k, effect))) for k in VERDICT_POWERS},
                "smallest_effect_80": {k: c.smallest_effect(k, target) for k in VERDICT_POWERS},
            }
        )
    cheapest = {}
    for k in VERDICT_POWERS:
        ok = [r for r in rows if r["power_at_effect"][k]["power"] >= target and r["cost"].get("gpu_hours") is not None]
        cheapest[k] = min(ok, key=lambda r: r["cost"]["gpu_hours"])["name"] if ok else None
    max_se = max(max(s for s in c.se[k]) for c in done for k in VERDICT_POWERS)
    unreachable = generalises_unreachable(rows, target, max(draws.effects))
    out = dict(info)
    out.update(
        grid=asdict(grid),
        assumptions=asdict(a),
        settings=asdict(settings),
        phis=phis,
        headline_phi=float(headline),
        effect=float(effect),
        target=float(target),
        precision={
            "studies": studies,
            "seed": draws.seed,
            "largest_se": max_se,
            "se_at_half": se_of(0.5, studies),
            "how": "Monte Carlo standard error sqrt(p (1 - p) / studies) of each power "
            "(per-run cells: over their runs)",
        },
        curves=[c.to_json() for c in base],
        alternatives=rows,
        cheapest=cheapest,
        generalises_unreachable=unreachable,
    )
    if items_table:
        out["items"] = _items_needed(ladder, steps, head, effect, target, info.get("testset_sizes", {}))
    return out


def generalises_unreachable(rows: list[dict], target: float, largest: float) -> dict | None:
    """When the grid as configured (``rows[0]``) finds ``generalises`` too rarely at every effect up to ``largest``."""
    if rows[0]["smallest_effect_80"]["generalises"] is not None:
        return None
    fixes = [
        r
        for r in rows[1:]
        if r["smallest_effect_80"]["generalises"] is not None and r["cost"].get("gpu_hours") is not None
    ]
    fix = min(fixes, key=lambda r: r["cost"]["gpu_hours"]) if fixes else None
    return {
        "largest_effect": float(largest),
        "target": float(target),
        "fix": None if fix is None else fix["name"],
        "fix_smallest_effect": None if fix is None else fix["smallest_effect_80"]["generalises"],
    }


def _eff(e) -> str:
    return "> 0.9" if e is None else f"{e:.2f}"


SHORT = {"cell": "cell", "cell_corrected": "cell (corrected)", "sign reversal": "sign reversal", **ITEM_SHORT}


def markdown(rep: dict, budget_markdown: str = "") -> str:
    """The report as markdown (printed by ``oodcorr design`` and written to ``<prefix>.md``)."""
    g, a, st = rep["grid"], rep["assumptions"], rep["settings"]
    src = rep.get("sources", {})
    shape = (
        "a logistic curve of its own per run and testset (an early plateau or a late emergence; `Assumptions.shape`)"
        if a.get("shape", "line") == "curve"
        else "a straight line (its loading times the in-domain score)"
    )
    items = a["items"]  # :class:`.power.ItemNoise` as a dict
    no_noise = items["in_domain"] is None and items["ood"] is None
    # the share of items two neighbouring checkpoints answer differently at the OOD sets' accuracy
    disagree = disagreement(items["accuracy"], items["difficulty"] + (1 - items["difficulty"]) * items["persistence"])
    noise_words = (
        "none (every testset infinitely large)"
        if no_noise
        else f"the in-domain set {_n(items['in_domain'])}, each OOD set {_n(items['ood'])}, the same items at "
        f"every checkpoint; an item's deviation persists with AR(1) coefficient {items['persistence']:.3g} (its "
        f"own difficulty {items['difficulty']:.3g} of it), so neighbouring checkpoints disagree on "
        f"{disagree:.0%} of an OOD set's items at its accuracy {items['accuracy']:.2f}; the OOD "
        f"residual series' sd {items['residual_sd']:.3g} in score units"
    )
    res = st.get("residualiser", "linear")
    res += (
        " (the config's; simulated by the spline, the same penalised cubic spline with REML for GCV)"
        if res.startswith("gam")
        else " (the config's first)"
    )
    lines = [
        f"# Design: experiment {rep.get('experiment', '')}".rstrip(),
        "",
        f"Config {rep.get('config', '')}. Written by `oodcorr design`: how often the analysis finds an effect "
        "in studies of this grid, by simulating them and analysing them with the analysis' own procedures "
        "(docs/design.md#planning-a-study-oodcorr-design).",
        "",
        "**The grid.** "
        f"{g['models']} models x {g['runs']} runs per pool group (seeds) x {g['checkpoints']} checkpoints per run; "
        f"each table ({rep.get('tables', 1)} in all: {rep.get('tables_how', 'one')}) has {g['pairs']} OOD pairs, "
        f"corrected together (the cells: {st['correction']}; the answer's statements: "
        f"{st.get('agreement_correction', 'bh')}; alpha {st['alpha']:g}).",
        "",
        "**Assumptions** (what a simulated study is; each can be set by a flag or estimated from a pilot, `--pilot`):",
        "",
        f"* AR(1) coefficient of the residual series (phi): {', '.join(f'{p:g}' for p in rep['phis'])}; "
        f"the alternatives at {rep['headline_phi']:g} ({src.get('phi', 'default')});",
        f"* spread of the true partial correlation between models: sd {a['model_sd']:.2f} on the Fisher z scale "
        f"({src.get('model_sd', 'default: every model shares the effect')}); between runs of a model: "
        f"{a['run_sd']:.2f} ({src.get('run_sd', 'default')});",
        f"* item noise: {noise_words} ({src.get('items', 'default: none')}; the persistence: "
        f"{src.get('persistence', 'default')}; the residual sd: {src.get('residual_sd', 'default')});",
        f"* pairs of a table with the effect: {a['non_null_pairs']} (the others null); pairs are independent;",
        f"* each OOD score follows the in-domain score along {shape}, plus its AR(1) residual series;",
        f"* residualiser {res}, method Pearson, the modified t-test per run; with item noise, "
        "each run also cross-fitted and the answer the measured one (the ladder on r_eiv, near zero through the "
        "noise, noise-limited), as the workflow gives it"
        + (
            ""
            if no_noise or st.get("residualiser", "linear").startswith("linear")
            else " (the cross-fitted r_eiv has the line's form only: the spline of a noisy in-domain score has no "
            "measured form, so the item-noise answer is the line's)"
        )
        + "; effects are partial correlations of the tasks"
        + (", without the item noise." if not no_noise else "."),
        "",
        f"**Precision.** Every power is a share of {rep['precision']['studies']:,} simulated studies per effect "
        f"(seed {rep['precision']['seed']}): its Monte Carlo standard error is at most "
        f"{rep['precision']['se_at_half']:.3f} (at a power of 0.5), {rep['precision']['largest_se']:.3f} at the "
        "largest here; per-run cells are shares of all the studies' runs. The same draws serve every effect "
        "and every testset size.",
        "",
    ]
    for c in rep["curves"]:
        phi = c["assumptions"]["phi"]
        lines += [
            f"## Power at phi {phi:g}",
            "",
            "| effect | " + " | ".join(SHORT[k] for k in VERDICT_POWERS) + " | near zero |",
            "| ---: | " + " | ".join("---:" for _ in VERDICT_POWERS) + " | ---: |",
        ]
        for i, e in enumerate(c["effects"]):
            lines.append(
                f"| {e:.2f} | "
                + " | ".join(_f(c["power"][k][i]) for k in VERDICT_POWERS)
                + f" | {_f(c['near_zero'][i])} |"
            )
        lines.append(
            "| **80 % at** | " + " | ".join(f"**{_eff(c['smallest_effect_80'][k])}**" for k in VERDICT_POWERS) + " | |"
        )
        lines.append("")
    lines += [
        "Effect 0 is the null: its row is the false-positive rate of each (per-run cells: the share of null "
        "runs whose interval excludes 0; the signs: of either sign). *cell*: a run's own interval excludes 0; "
        "*cell (corrected)*: significant after the correction across the table's pairs, as the heatmaps mark it; "
        "*sign on average*: every model has the effect, and the answer states its sign (on average, or in nearly "
        "every model); *sign in nearly every model*: the same studies, the answer's strongest rung "
        "(`positive in nearly every model`); *sign reversal*: half the models have +effect and half -effect, "
        "the verdict `sign reversal`; *near zero*: every model has the effect and the answer says the models agree "
        "near zero (at effect 0 the power of that claim, from the analysis' near_zero on a false statement). The "
        "per-run cells are the observed ones the heatmaps mark, which the in-domain set's item noise can fake; the "
        "answer's statements read the cross-fitted correlations, which it cannot.",
        "",
        f"## Alternatives (phi {rep['headline_phi']:g}; power at effect {rep['effect']:g})",
        "",
        "| change | grid (models x runs x checkpoints) | GPU-hours (limits) | GPU-hours (work) | "
        + " | ".join(SHORT[k] for k in VERDICT_POWERS)
        + " | 80 % at (cell / corrected / on average / nearly every / reversal) |",
        "| --- | --- | ---: | ---: | " + " | ".join("---:" for _ in VERDICT_POWERS) + " | --- |",
    ]
    for r in rep["alternatives"]:
        gg, cost = r["grid"], r["cost"]
        hours = ["n/a" if cost.get(k) is None else f"{cost[k]:,.0f}" for k in ("gpu_hours", "gpu_hours_work")]
        lines.append(
            f"| {r['name']} | {gg['models']} x {gg['runs']} x {gg['checkpoints']} | {hours[0]} | {hours[1]} | "
            + " | ".join(_f(r["power_at_effect"][k]["power"]) for k in VERDICT_POWERS)
            + " | "
            + " / ".join(_eff(r["smallest_effect_80"][k]) for k in VERDICT_POWERS)
            + " |"
        )
    lines.append("")
    at = f"{rep['target']:.0%} at effect {rep['effect']:g}"
    for k in VERDICT_POWERS:
        name = rep["cheapest"][k]
        said = f"the cheapest row reaching {at} is **{name}**" if name else f"no row reaches {at}"
        lines.append(f"* {POWER_LABELS[k]}: {said}")
    un = rep.get("generalises_unreachable")
    if un:
        g0 = rep["alternatives"][0]["grid"]
        lines.append(
            f"* **the sign in nearly every model is out of reach for this grid**: with {g0['models']} models x "
            f"{g0['runs']} runs, the tolerance bounds exclude 0 in fewer than {un['target']:.0%} of studies at every "
            f"effect up to {un['largest_effect']:g}: so few or so noisy models cannot show that models of the other "
            "sign are rare, even when every model has the same correlation; the answer then says the sign on "
            "average (docs/answer.md#the-prediction-interval-and-the-tolerance-bounds). "
            + (
                f"The cheapest change that reaches it: **{un['fix']}** ({un['target']:.0%} at effect "
                f"{un['fix_smallest_effect']:.2f})."
                if un["fix"]
                else "No change simulated here reaches it; more models with 3 runs each is what the calibration "
                "shows works (benchmarks/README.md#14-the-answer-across-models-every-rung-measured)."
            )
        )
    lines += [""] + [f"* {r['name']}: {r['description']}" for r in rep["alternatives"][1:]]
    lines += [f"* {n}" for n in rep.get("cost_notes", [])]
    if rep.get("items"):  # the items table (:func:`_items_needed`'s dict)
        it, phi = rep["items"], rep["headline_phi"]
        claims = it["claims"]
        at = it["as_configured"]
        lines += [
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
    pilot = rep.get("pilot")
    if pilot:
        po, ph = pilot["phi_observed"], pilot["phi"]
        lines += [
            "",
            "## From the pilot",
            "",
            f"{rep.get('pilot_file', '')}: {pilot['models']} models, {pilot['runs']} runs, {pilot['series']} residual "
            f"series, {pilot['checkpoints']} checkpoints per run.",
            "",
            f"* phi: **{ph['estimate']:.2f}** (95 % interval {ph['low']:.2f}-{ph['high']:.2f}, a bootstrap over runs), "
            f"{ph['how']}. The series' own corrected estimates: median {po['median']:.2f}, interquartile range "
            f"{po['iqr'][0]:.2f}-{po['iqr'][1]:.2f}, {po['at_cap']:.0%} at the cap 0.99; median per testset: "
            + ", ".join(f"{t} {v:.2f}" for t, v in po["per_testset"].items())
            + ";",
        ]
        est = pilot["items"]  # its item noise (:func:`.pilot.pilot_estimates`' ``items``)
        if est.get("per_testset", {}):
            lines.append(
                "* item noise: "
                + "; ".join(
                    f"{t} {e['items']:,} items"
                    + (
                        f", neighbours disagree on {e['disagreement']:.0%}, persistence {e['persistence']:.2f} "
                        f"(difficulty {e['difficulty']:.2f})"
                        if e.get("persistence") is not None
                        else " (size only)"
                    )
                    for t, e in est["per_testset"].items()
                )
                + ";"
            )
        if est.get("persistence") is not None:
            lines.append(
                f"* persistence of the item noise: **{est['persistence']:.2f}** (difficulty {est['difficulty']:.2f}), "
                f"the median over the testsets with per-item correctness, {est['how']};"
            )
        if est.get("residual_sd") is not None:
            lines.append(
                f"* the OOD residual series' sd without item noise: **{est['residual_sd']:.3f}** in score units "
                f"(median over testsets), at accuracy {est['accuracy']:.2f};"
            )
        lines += [
            f"* between models: sd {pilot['model_sd']['estimate']:.2f} (interquartile range over "
            f"{pilot['model_sd']['pairs']} pairs {_f(pilot['model_sd']['iqr'][0])}-{_f(pilot['model_sd']['iqr'][1])}); "
            f"between runs: sd {pilot['run_sd']['estimate']:.2f};",
        ]
        lines += [f"* {n}" for n in pilot["notes"]]
    notes = rep.get("notes", [])
    if notes:
        lines += ["", "## Notes", ""] + [f"* {n}" for n in notes]
    out = "\n".join(lines) + "\n"
    if budget_markdown:
        out += "\n" + budget_markdown.replace("# Budget:", "## Budget of the grid as configured:", 1)
    return out
