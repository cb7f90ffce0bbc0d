"""The report of ``oodcorr design`` (:func:`report`, a JSON-ready dict; :func:`markdown`): the power curves, the
alternatives with their cost, how many items each testset needs; a pilot's estimates come in through ``info``."""

from __future__ import annotations

from dataclasses import asdict, replace

import numpy as np

from .power import POWER_LABELS, VERDICT_POWERS, Assumptions, Curve, Draws, Grid, Settings, curves, se_of
from .sizes import ITEM_SHORT, item_noise_words, items_markdown, items_needed, ladder_assumptions, no_item_noise
from .sizes import share_text as _f


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
        out["items"] = items_needed(ladder, steps, head, effect, target, info.get("testset_sizes", {}))
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


def _pilot_items_lines(items: dict) -> list[str]:
    """The pilot's item noise (:func:`.pilot.pilot_estimates`' ``items``) as markdown bullets."""
    out = []
    per = items.get("per_testset", {})
    if per:
        out.append(
            "* item noise: "
            + "; ".join(
                f"{t} {e['items']:,} items"
                + (
                    f", neighbours disagree on {e['disagreement']:.0%}, persistence {e['persistence']:.2f} "
                    f"(difficulty {e['difficulty']:.2f})"
                    if e.get("persistence") is not None
                    else " (size only)"
                )
                for t, e in per.items()
            )
            + ";"
        )
    if items.get("persistence") is not None:
        out.append(
            f"* persistence of the item noise: **{items['persistence']:.2f}** (difficulty {items['difficulty']:.2f}), "
            f"the median over the testsets with per-item correctness, {items['how']};"
        )
    if items.get("residual_sd") is not None:
        out.append(
            f"* the OOD residual series' sd without item noise: **{items['residual_sd']:.3f}** in score units "
            f"(median over testsets), at accuracy {items['accuracy']:.2f};"
        )
    return out


def markdown(rep: dict, budget_markdown: str = "") -> str:
    """The report as markdown (printed by ``oodcorr design`` and written to ``<prefix>.md``)."""
    g, a, st = rep["grid"], rep["assumptions"], rep["settings"]
    src = rep.get("sources", {})
    shape = (
        "a logistic curve of its own per run and testset (an early plateau or a late emergence; `Assumptions.shape`)"
        if a.get("shape", "line") == "curve"
        else "a straight line (its loading times the in-domain score)"
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
        f"* item noise: {item_noise_words(a['items'])} ({src.get('items', 'default: none')}; the persistence: "
        f"{src.get('persistence', 'default')}; the residual sd: {src.get('residual_sd', 'default')});",
        f"* pairs of a table with the effect: {a['non_null_pairs']} (the others null); pairs are independent;",
        f"* each OOD score follows the in-domain score along {shape}, plus its AR(1) residual series;",
        f"* residualiser {res}, method Pearson, the modified t-test per run; with item noise, "
        "each run also cross-fitted and the answer the measured one (the ladder on r_eiv, near zero through the "
        "noise, noise-limited), as the workflow gives it"
        + (
            ""
            if no_item_noise(a["items"]) or st.get("residualiser", "linear").startswith("linear")
            else " (the cross-fitted r_eiv has the line's form only: the spline of a noisy in-domain score has no "
            "measured form, so the item-noise answer is the line's)"
        )
        + "; effects are partial correlations of the tasks"
        + (", without the item noise." if not no_item_noise(a["items"]) else "."),
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
    if rep.get("items"):
        lines += items_markdown(rep["items"], rep["headline_phi"])
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
            *_pilot_items_lines(pilot["items"]),
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
