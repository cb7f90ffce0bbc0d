"""The figures of the answer across models: the consensus heatmap and one pair's forest plot."""

from __future__ import annotations

import math
import os
import textwrap
from functools import partial

import numpy as np
import pandas as pd

from ...analysis.items.measurement import NOISE_LIMITED
from ...core.answer import (
    AGREE_NEAR_ZERO,
    DEPENDS_ON_FORM,
    NEARLY_EVERY,
    NOISE_LIMITED_VERDICT,
    ON_AVERAGE,
    SPREADS,
    about,
    every_run_sign,
    interval_text,
    reliabilities,
    verdict_rank,
)
from .common import (
    CMAP,
    TEXT_LIMIT,
    blank,
    cell_text,
    draw_cells,
    heatmap_figure,
    natural_key,
    pair_matrix,
    panel_inches,
    pyplot,
    save,
    testset_order,
    triangle_axes,
)

SPREAD_MARKS = tuple(zip(SPREADS, ("±", "≠", "≈0")))  # each spread's glyph, strongest first
NOISE_MARK = "∿"  # noise-limited: a testset's residual series is mostly item noise
EVERY_RUN_MARK = "*"  # no statement across models, but one sign in each model's own run: drawn unfaded
FOLD_FROM = 16  # names of at most this many characters are shown whole, their common start too
LABEL_MAX = 26  # a tick label longer than this (after the common prefix is folded) keeps its two ends
SEPARATORS = "/_-.:"  # a common prefix is folded up to the last of these it ends with
DOTTED = {"lw": 1.3, "ls": (0, (1, 1.6)), "edgecolor": "0.3"}  # a noise-limited cell's frame
# a verdict's frame (verdict_style): half its side, and how it is drawn
FRAMES = {
    "solid": (0.47, {"lw": 1.6, "edgecolor": "black"}),
    "dashed": (0.45, {"lw": 0.8, "ls": "--", "edgecolor": "dimgrey"}),
    "dotted": (0.44, DOTTED),
}


def verdict_style(word: str) -> dict:
    """How the consensus heatmap draws a verdict: ``mark``, ``frame`` (solid/dashed/dotted/""), ``bold``, ``faded``."""
    spread = next((m for phrase, m in SPREAD_MARKS if phrase in word), "")
    noise = word == NOISE_LIMITED_VERDICT
    nearly = NEARLY_EVERY in word
    signed = nearly or ON_AVERAGE in word
    return {
        "mark": NOISE_MARK if noise else spread,
        "frame": "solid" if nearly else ("dashed" if word == AGREE_NEAR_ZERO else ("dotted" if noise else "")),
        "bold": nearly,
        "faded": not (signed or spread),
    }


def fold_names(names: list[str]) -> tuple[str, dict[str, str]]:
    """(the common prefix of ``names``, {name: its label without it}); a label over LABEL_MAX keeps its two ends."""
    prefix = ""
    if len(names) >= 2 and max(map(len, names)) > FOLD_FROM:
        common = os.path.commonprefix(names)
        cut = max(common.rfind(c) for c in SEPARATORS) + 1
        prefix = common[:cut] if cut >= 4 and all(len(n) > cut for n in names) else ""
    short = {n: n[len(prefix) :] for n in names}
    head = LABEL_MAX // 2 - 2
    tail = LABEL_MAX - head - 1
    clipped = {n: (s if len(s) <= LABEL_MAX else f"{s[:head]}…{s[-tail:]}") for n, s in short.items()}
    if len(set(clipped.values())) == len(clipped):
        short = clipped
    return prefix, short


def short_reliability(est: float, low: float) -> str:
    """A reliability beside a name: the estimate, '≥' its low end, 'noise>var' below 0, '' where unknown."""
    if math.isfinite(est):
        return "noise>var" if est < 0 else (f"{est:.2f}" if est <= 1 else ">1")
    return f"≥{max(low, 0.0):.2f}" if math.isfinite(low) else ""


def reliability_names(rows: pd.DataFrame, labels: dict[str, str] | None = None) -> dict[str, str]:
    """Each testset of ``rows`` (and the in-domain set) as its label (default: its name) and reliability where known."""
    labels = labels or {}
    out = dict(labels)
    for name, (est, low) in reliabilities(rows.to_dict("records")).items():
        rel = short_reliability(est, low)
        label = labels.get(name, name)
        out[name] = f"{label} ({rel})" if rel else label
    return out


def _answer_rows(table: pd.DataFrame, method: str, residualiser: str, in_domain: str) -> pd.DataFrame:
    return table[
        (table["method"] == method)
        & (table["residualiser"] == residualiser)
        & (table["in_domain"].astype(str) == str(in_domain))
    ]


def consensus_heatmap(
    agree: pd.DataFrame,
    out_png: str,
    method: str,
    residualiser: str,
    in_domain: str,
    alpha: float | None = None,
    near_zero: float | None = None,
) -> dict:
    """The answer for one in-domain set: every OOD pair's consensus across models, marked by its verdict
    (:func:`verdict_style`), a panel per pool group. Returns {(pool_group, row, col): label}."""
    plt = pyplot()
    sub = _answer_rows(agree, method, residualiser, in_domain)
    groups = sorted(sub["pool_group"].astype(str).unique()) or [""]
    n_names = max([len(set(g["x"]) | set(g["y"])) for _, g in sub.groupby("pool_group")] + [2])
    fig, axes = heatmap_figure(plt, n_names, len(groups), title_lines=4)
    import matplotlib as mpl
    from matplotlib.patches import Patch

    norm = mpl.colors.Normalize(vmin=-1, vmax=1)
    cmap = mpl.colormaps[CMAP]
    cells, drawn_styles, reliable = {}, {}, False
    for ax, group in zip(axes, groups):
        rows = sub[sub["pool_group"].astype(str) == group].assign(r=lambda d: d["r_consensus"])
        names = testset_order(rows)
        prefix, folded = fold_names(names)
        shown = reliability_names(rows, folded)
        reliable = reliable or any(label != folded.get(name, name) for name, label in shown.items())
        if len(names) < 2:
            known = ", ".join(sorted(agree["in_domain"].astype(str).unique())) or "none"
            blank(ax, f"no pair of OOD testsets for in-domain {in_domain}\n(the table has: {known})")
            continue
        m = pair_matrix(rows, names, "r_consensus")[1:, :-1]
        verdicts = np.full(m.shape, "", dtype=object)
        every_run = np.zeros(m.shape, bool)
        idx = {n: i for i, n in enumerate(names)}
        for row in rows.to_dict("records"):
            i, j = idx[row["x"]], idx[row["y"]]
            verdicts[max(i, j) - 1, min(i, j)] = row["verdict"]
            every_run[max(i, j) - 1, min(i, j)] = bool(every_run_sign(row))
        present = verdicts != ""
        finite = np.isfinite(m)
        every_run &= finite
        styles = {w: verdict_style(str(w)) for w in set(verdicts.ravel().tolist())}
        drawn_styles.update({w: styles[w] for w in set(verdicts[present & ~every_run].tolist())})
        if every_run.any():
            drawn_styles[EVERY_RUN_MARK] = {"mark": EVERY_RUN_MARK, "frame": "", "bold": False, "faded": False}
        fade = finite & np.isin(verdicts, [w for w, st in styles.items() if st["faded"]]) & ~every_run
        big = len(names) > TEXT_LIMIT
        draw_cells(ax, m, fade, present, big, norm, cmap)
        rnames, cnames = names[1:], names[:-1]
        for i, j in zip(*np.nonzero(present)):
            v, word = m[i, j], verdicts[i, j]
            style = styles[word]
            mark = EVERY_RUN_MARK if every_run[i, j] else style["mark"]
            label = f"{v:+.2f}{mark}" if math.isfinite(v) else "n/a"
            cells[(group, rnames[i], cnames[j])] = f"{label} ({word})"
            if style["frame"]:
                half, look = FRAMES[style["frame"]]
                ax.add_patch(plt.Rectangle((j - half, i - half), 2 * half, 2 * half, fill=False, **look))
            if not finite[i, j]:
                ax.add_patch(plt.Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, hatch="///", edgecolor="grey", lw=0))
            if big:
                if mark:
                    cell_text(ax, i, j, mark, len(names), "black")
                continue
            colour = "dimgrey" if fade[i, j] else ("white" if finite[i, j] and abs(v) > 0.6 else "black")
            cell_text(ax, i, j, label, len(names), colour, style["bold"])
        triangle_axes(ax, [shown.get(n, n) for n in rnames], [shown.get(n, n) for n in cnames], len(names), big)
        n_models = int(pd.to_numeric(rows["n_models_consensus"], errors="coerce").max())
        counts = rows["verdict"].value_counts()
        tally = ", ".join(f"{n} {w}" for w, n in sorted(counts.items(), key=lambda t: verdict_rank(str(t[0]))))
        if n_models == 2:
            tally += " (2 models: nothing can be said of a further model, so no sign in nearly every model)"
        where = f" ({group})" if group not in ("", "all runs") else ""
        dom_rel = reliability_names(rows).get(str(in_domain), str(in_domain))  # the in-domain name in full
        said = about(rows.to_dict("records"))
        folded_said = f"testsets named without their common start {prefix!r}\n" if prefix else ""
        ax.set_title(
            f"in-domain {dom_rel}{where}: consensus of {n_models} models ({method}, {residualiser})\n"
            + (f"the answer is {said}\n" if said else "")
            + folded_said
            + textwrap.fill(tally, max(40, int(14 * panel_inches(len(names))))),
            fontsize=8,
        )
    bar = fig.colorbar(mpl.cm.ScalarMappable(norm=norm, cmap=cmap), ax=axes, shrink=0.8)
    bar.set_label("consensus partial r\nacross models (observed)", fontsize=8)  # one line ran past the bar
    correction = str(sub["correction"].iloc[0]) if len(sub) and "correction" in sub else "corrected"
    # the legend: an entry per kind of verdict drawn, and the reliability's
    red, faded = cmap(norm(0.55)), tuple(0.4 * np.array(cmap(norm(0.55))[:3]) + 0.6)
    a = f"{alpha:g}" if alpha is not None else "alpha"
    nz = f"{near_zero:g}" if near_zero is not None else "near_zero"
    drawn = [st for w, st in drawn_styles.items() if w != EVERY_RUN_MARK]
    marks, frames = {st["mark"] for st in drawn}, {st["frame"] for st in drawn}
    entries = [
        (
            "solid" in frames,
            Patch(facecolor=red, edgecolor="black", lw=1.6),
            "framed, bold: the sign in nearly every model (the other sign in under 2.5 % of such models)",
        ),
        (
            any(not st["faded"] and st["frame"] != "solid" for st in drawn),
            Patch(facecolor=red),
            f"plain: the sign on average ({correction} across pairs, {a})",
        ),
        ("±" in marks, Patch(facecolor="white", edgecolor="0.6"), "±: sign reversal"),
        ("≠" in marks, Patch(facecolor="white", edgecolor="0.6"), "≠: models differ"),
        ("≈0" in marks, Patch(facecolor="white", edgecolor="dimgrey", ls="--"), f"≈0: near zero (±{nz})"),
        (
            EVERY_RUN_MARK in drawn_styles,
            Patch(facecolor=red),
            f"{EVERY_RUN_MARK}, not faded: no statement across models, but significant with one sign in each "
            "model's own run (a fact about these runs, not a prediction)",
        ),
        (any(st["faded"] and st["frame"] != "dotted" for st in drawn), Patch(facecolor=faded), "faded: unresolved"),
        (
            "dotted" in frames,
            Patch(facecolor=faded, **DOTTED),
            f"{NOISE_MARK} in a dotted frame: noise-limited (a testset's residual series mostly item noise: "
            f"reliability below {NOISE_LIMITED:g})",
        ),
        (
            reliable,
            Patch(facecolor="none", edgecolor="none"),
            "(0.35) beside a name: its reliability, the share "
            "of its residual variance that is not item noise (≥: bounded by its size)",
        ),
    ]
    handles = [(h, label) for shown, h, label in entries if shown]
    if handles:
        fig.legend(
            [h for h, _ in handles],
            [label for _, label in handles],
            loc="outside lower center",
            ncols=1 if len(groups) == 1 else 2,
            fontsize=7,
            frameon=False,
        )
    save(fig, out_png, tight=n_names <= TEXT_LIMIT)
    return cells


FOREST_CAP = 50  # oodcorr analyse draws at most this many forest plots per in-domain set (--forest-max)


def forest_pairs(agree: pd.DataFrame, in_domain: str, method: str, residualiser: str, cap: int = FOREST_CAP):
    """The OOD pairs of an in-domain set to draw (``cap``: verdicts that say most, then the largest), and how many."""
    sub = _answer_rows(agree, method, residualiser, in_domain)
    best = {}
    for row in sub.itertuples(index=False):
        key = tuple(sorted((str(row.x), str(row.y))))
        size = abs(float(row.r_consensus)) if np.isfinite(float(row.r_consensus)) else -1.0
        score = (verdict_rank(str(row.verdict)), -size)
        best[key] = min(best.get(key, score), score)
    pairs = sorted(best, key=lambda k: (best[k], k))
    return sorted(pairs[:cap]), len(pairs)


TASKS = "tab:blue"  # the tasks' correlations (item noise out) in a forest plot


def forest(
    agree: pd.DataFrame,
    pc: pd.DataFrame,
    out_png: str,
    in_domain: str,
    x: str,
    y: str,
    method: str,
    residualiser: str,
    near_zero: float | None = None,
    level: float | None = None,
) -> dict:
    """Why one OOD pair got its verdict: each model's pooled r (its runs, its tasks' r), the consensus and
    its intervals, a panel per pool group. Returns {pool_group: what each row says}."""
    plt = pyplot()

    def pair_rows(df):
        df = _answer_rows(df, method, residualiser, in_domain)
        xs, ys = df["x"].astype(str), df["y"].astype(str)
        return df[((xs == x) & (ys == y)) | ((xs == y) & (ys == x))]

    arows, prows = pair_rows(agree), pair_rows(pc)
    groups = sorted(arows["pool_group"].astype(str).unique()) or [""]
    models = sorted(prows["model"].astype(str).unique(), key=natural_key)
    read = (
        "r_consensus_eiv" in arows and np.isfinite(pd.to_numeric(arows["ci_low_consensus_eiv"], errors="coerce")).any()
    )
    summary = ["consensus", *(["read"] if read else []), *(["tasks"] if "r_consensus_corrected" in arows else [])]
    summary += ["prediction", "tolerance"]
    at = {k: len(summary) - 2 - i for i, k in enumerate(summary)}  # the tolerance bounds at -1
    height = 2.1 + 0.32 * (len(models) + len(summary) + 1)
    fig, axes = plt.subplots(1, len(groups), figsize=(7.5 * len(groups), height), squeeze=False)
    out = {}
    lvl = f"{100 * level:g} % " if level else ""
    for ax, group in zip(axes[0], groups):
        a = arows[arows["pool_group"].astype(str) == group]
        p = prows[prows["pool_group"].astype(str) == group]
        pooled = p[p["run"] == "pooled"].set_index(p.loc[p["run"] == "pooled", "model"].astype(str))
        runs = p[p["run"] != "pooled"]
        ys = {m: len(models) - i + at["consensus"] + 1 for i, m in enumerate(models)}  # top to bottom
        ax.axvline(0, color="black", lw=0.8)
        if near_zero:
            ax.axvspan(-near_zero, near_zero, color="0.92", zorder=0)
        side = partial(ax.text, 1.04, transform=ax.get_yaxis_transform(), va="center", fontsize=8)  # right of the panel
        drawn, corrected, lines = [], {}, {}
        for m in models:
            yy = ys[m]
            rr = runs[runs["model"].astype(str) == m]["r"].to_numpy(float)
            rr = rr[np.isfinite(rr)]
            if len(rr) > 1:
                ax.plot(rr, np.full(len(rr), yy) + np.linspace(-0.18, 0.18, len(rr)), "o", ms=3, color="0.55", zorder=2)
            if m not in pooled.index:
                continue
            row = pooled.loc[m]
            r, lo, hi = (float(row[c]) for c in ("r", "ci_low", "ci_high"))
            rc, clo, chi = (float(row.get(c, np.nan)) for c in ("r_corrected", "ci_low_corrected", "ci_high_corrected"))
            tasks = np.isfinite(rc) or (np.isfinite(clo) and np.isfinite(chi))
            if np.isfinite(lo) and np.isfinite(hi):
                ax.plot([lo, hi], [yy, yy], color="black", lw=1.2, zorder=3)
            label = interval_text(r, lo, hi) if np.isfinite(lo) or not np.isfinite(r) else f"{r:+.2f} (no interval)"
            if np.isfinite(r):
                ax.plot([r], [yy], "s", ms=6, color="black", zorder=4)
                drawn.append(m)
            r_line = float(row.get("r_line", np.nan))
            if np.isfinite(r_line):  # the line, the curve's check: a hollow triangle above
                ax.plot([r_line], [yy + 0.22], "v", ms=4.5, mfc="white", mec="0.35", zorder=4)
                lines[m] = r_line
            side(yy + (0.14 if tasks else 0), label)
            if tasks:
                corrected[m] = interval_text(rc, clo, chi)
                if np.isfinite(clo) and np.isfinite(chi):
                    ax.plot([clo, chi], [yy - 0.3] * 2, color=TASKS, lw=0.9, zorder=3)
                if np.isfinite(rc):
                    ax.plot([rc], [yy - 0.3], "o", ms=4.5, mfc="white", mec=TASKS, zorder=4)
                side(yy - 0.26, f"tasks: {corrected[m]}", color=TASKS, fontsize=7)
        verdict, n_models, tally, rel, said = "no agreement row", 0, {}, "", ""
        if len(a):
            row = a.iloc[0]
            verdict = str(row["verdict"])
            if str(row.get("form", "")) == DEPENDS_ON_FORM:
                verdict += f" ({DEPENDS_ON_FORM}: the line says {row.get('line_verdict')})"
            n_models = int(row["n_models_consensus"]) if np.isfinite(float(row["n_models_consensus"])) else 0
            say = {}
            for key, sfx, style in (
                ("consensus", "", {"color": "tab:red"}),
                ("read", "_eiv", {"facecolor": "white", "edgecolor": "tab:red", "lw": 1.2}),
                ("tasks", "_corrected", {"facecolor": "white", "edgecolor": TASKS, "lw": 1.2}),
            ):
                if key not in at:
                    continue
                est, lo, hi = (float(row.get(f"{c}_consensus{sfx}", np.nan)) for c in ("r", "ci_low", "ci_high"))
                yy = at[key]  # a diamond over the interval, a bar where it has no estimate
                if np.isfinite(est) and np.isfinite(lo) and np.isfinite(hi):
                    ax.fill([lo, est, hi, est], [yy, yy + 0.3, yy, yy - 0.3], zorder=4, **style)
                elif np.isfinite(lo) and np.isfinite(hi):
                    ax.fill([lo, hi, hi, lo], [yy - 0.12, yy - 0.12, yy + 0.12, yy + 0.12], zorder=4, **style)
                elif np.isfinite(est):
                    ax.plot([est], [yy], "D", zorder=4, color=style.get("edgecolor", style.get("color")))
                say[key] = interval_text(est, lo, hi)
                if key == "tasks" and say[key] == "n/a":
                    say[key] = "n/a: " + (str(row.get("about")) if isinstance(row.get("about"), str) else "unknown")
                side(at[key], say[key], color=TASKS if key == "tasks" else "tab:red")
            for key, c, style in (
                ("prediction", "pi", {"lw": 3, "solid_capstyle": "butt", "alpha": 0.6}),
                ("tolerance", "tol", {"lw": 1.2, "marker": "|", "ms": 10, "zorder": 3}),
            ):
                lo, hi = (float(row.get(f"{c}_{end}_consensus", np.nan)) for end in ("low", "high"))
                if np.isfinite(lo) and np.isfinite(hi):
                    ax.plot([lo, hi], [at[key]] * 2, color="tab:red", **style)
                    say[key] = f"[{lo:+.2f}, {hi:+.2f}]"
                else:
                    say[key] = "none (fewer than 3 models)" if n_models < 3 else "n/a"
                side(at[key], say[key], color="tab:red")
            parts = []  # the pair's reliabilities in words, for the title
            for name, end in ((x, "x"), (y, "y"), (f"in-domain {in_domain}", "in_domain")):
                known = short_reliability(
                    float(row.get(f"reliability_{end}", np.nan)), float(row.get(f"reliability_{end}_low", np.nan))
                )
                if known:
                    parts.append(f"{name} {known}")
            rel = "reliability " + ", ".join(parts) if parts else ""
            said = about([row.to_dict()])
            limited = row.get("noise_limited")
            if isinstance(limited, str) and limited and verdict == NOISE_LIMITED_VERDICT:
                verdict += f" by {limited}"
            tally = {**say, "reliability": rel, "about": said}
        ax.axhline(at["consensus"] + 0.75, color="0.6", lw=0.6)
        labels = {
            "consensus": f"consensus of {n_models} models",
            "read": "in-domain noise out\n(what the verdict read)",
            "tasks": "the tasks' consensus\n(item noise out)",
            "prediction": "prediction interval\n(a further model)",
            "tolerance": "97.5 % of models\n(tolerance)",
        }
        ax.set_yticks(
            [ys[m] for m in models] + [at[k] for k in summary],
            [*models, *(labels[k] for k in summary)],
            fontsize=8 if len(models) <= 24 else 6,
        )
        for tick, k in zip(ax.get_yticklabels()[len(models) :], summary):
            tick.set_color(TASKS if k == "tasks" else "black")
        ax.set_ylim(-1.8, len(models) + at["consensus"] + 1.8)
        ax.set_xlim(-1.02, 1.02)
        ax.set_xlabel(
            f"partial r ({method}, {residualiser}); squares: each model pooled, dots: its runs, lines: {lvl}intervals"
            + (f"; grey band: near zero (±{near_zero:g})" if near_zero else "")
            + ("\nblue circles: each model's tasks' correlation (item noise out)" if corrected else "")
            + ("\nhollow triangles: each model's r on a straight line (the curve's check)" if lines else ""),
            fontsize=8,
        )
        where = f" ({group})" if group not in ("", "all runs") else ""
        ax.set_title(
            f"{x} × {y}, in-domain {in_domain}{where}\nverdict: {verdict}"
            + (f"\n{'; '.join(t for t in (rel, said) if t)}" if rel or said else ""),
            fontsize=10,
            fontweight="bold" if verdict_style(str(verdict))["bold"] else "normal",
        )
        ax.spines[["top", "right"]].set_visible(False)
        out[group] = {"models": drawn, "verdict": verdict, "corrected": corrected, "line": lines, **tally}
    # margins in inches instead of a tight_layout pass (a second layout of every text)
    fig.subplots_adjust(top=1 - 0.8 / height, bottom=0.7 / height)
    save(fig, out_png)
    return out
