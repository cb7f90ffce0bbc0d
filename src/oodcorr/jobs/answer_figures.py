"""The figures of the answer across models: the consensus heatmap (one per in-domain set, the
verdict of every OOD pair) and the forest plot of one pair (each model's pooled r, the consensus,
the prediction interval and the tolerance bounds), drawn through :func:`oodcorr.jobs.plots.draw`.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd

from ..analysis.consensus import NEARLY_EVERY, ON_AVERAGE, verdict_rank
from .plotting import (
    CMAP,
    TEXT_LIMIT,
    draw_cells,
    heatmap_figure,
    pair_matrix,
    panel_inches,
    pyplot,
    save,
    testset_order,
)

SPREAD_MARKS = (("sign reversal", "±"), ("models differ", "≠"), ("near zero", "≈0"))


def verdict_style(word: str) -> dict:
    """How the consensus heatmap draws a verdict of the ladder (:data:`oodcorr.analysis.consensus.VERDICTS`):
    ``mark``, a glyph after the value for the spread (± sign reversal, ≠ models differ, ≈0 near zero);
    ``frame``, "solid" for the sign in nearly every model, "dashed" for agree near zero, else "";
    ``bold`` for the sign in nearly every model; ``faded`` where the answer states nothing (unresolved,
    too few models, no data)."""
    mark = next((m for phrase, m in SPREAD_MARKS if phrase in word), "")
    nearly = NEARLY_EVERY in word
    signed = nearly or ON_AVERAGE in word
    return {
        "mark": mark,
        "frame": "solid" if nearly else ("dashed" if word == "agree near zero" else ""),
        "bold": nearly,
        "faded": not (signed or mark),
    }


def consensus_heatmap(
    agree: pd.DataFrame,
    out_png: str,
    method: str,
    residualiser: str,
    in_domain: str,
    alpha: float | None = None,
    near_zero: float | None = None,
) -> dict:
    """The answer for one in-domain set: the consensus across models of every OOD pair's partial
    correlation (``r_consensus`` of the agreement table), marked by its verdict (:func:`verdict_style`)
    -- bold with a black frame: the sign in nearly every model; plain: the sign on average; '±':
    sign reversal; '≠': models differ; '≈0' (with a dashed frame where no sign is shown): near zero;
    faded: unresolved; hatched 'n/a': no consensus. One panel per pool group. Returns
    {(pool_group, row, col): label}."""
    plt = pyplot()
    sub = agree[
        (agree["method"] == method)
        & (agree["residualiser"] == residualiser)
        & (agree["in_domain"].astype(str) == str(in_domain))
    ]
    groups = sorted(sub["pool_group"].astype(str).unique()) or [""]
    n_names = max([len(set(g["x"]) | set(g["y"])) for _, g in sub.groupby("pool_group")] + [2])
    fig, axes = heatmap_figure(plt, n_names, len(groups), title_lines=4)
    import matplotlib as mpl

    norm = mpl.colors.Normalize(vmin=-1, vmax=1)
    cmap = mpl.colormaps[CMAP]
    cells = {}
    for ax, group in zip(axes, groups):
        rows = sub[sub["pool_group"].astype(str) == group].assign(r=lambda d: d["r_consensus"])
        names = testset_order(rows)
        if len(names) < 2:
            known = ", ".join(sorted(agree["in_domain"].astype(str).unique())) or "none"
            ax.text(
                0.5,
                0.5,
                f"no pair of OOD testsets for in-domain {in_domain}\n(the table has: {known})",
                ha="center",
                va="center",
            )
            ax.set_axis_off()
            continue
        m = pair_matrix(rows, names, "r_consensus")[1:, :-1]
        verdicts = np.full(m.shape, "", dtype=object)
        idx = {n: i for i, n in enumerate(names)}
        for x, y, v in zip(rows["x"], rows["y"], rows["verdict"]):
            i, j = idx[x], idx[y]
            verdicts[max(i, j) - 1, min(i, j)] = v
        present = verdicts != ""
        finite = np.isfinite(m)
        rgba = cmap(norm(np.where(finite, m, 0.0)))
        styles = {w: verdict_style(str(w)) for w in set(verdicts.ravel().tolist())}
        faded = {w for w, st in styles.items() if st["faded"]}
        fade = finite & np.isin(verdicts, list(faded))
        rgba[fade, :3] = 0.4 * rgba[fade, :3] + 0.6
        rgba[present & ~finite] = (0.86, 0.86, 0.86, 1.0)
        rgba[~present] = (1, 1, 1, 0)
        big = len(names) > TEXT_LIMIT
        draw_cells(ax, rgba, big)
        rnames, cnames = names[1:], names[:-1]
        k = len(rnames)
        fs = max(4.5, min(9.0, 130 / len(names)))
        for i, j in zip(*np.nonzero(present)):
            v, word = m[i, j], verdicts[i, j]
            style = styles[word]
            mark = style["mark"]
            label = f"{v:+.2f}{mark}" if math.isfinite(v) else "n/a"
            cells[(group, rnames[i], cnames[j])] = f"{label} ({word})"
            general = style["bold"]
            if style["frame"] == "solid":
                ax.add_patch(plt.Rectangle((j - 0.47, i - 0.47), 0.94, 0.94, fill=False, lw=1.6, edgecolor="black"))
            elif style["frame"] == "dashed":
                ax.add_patch(
                    plt.Rectangle((j - 0.45, i - 0.45), 0.9, 0.9, fill=False, lw=0.8, ls="--", edgecolor="dimgrey")
                )
            if not finite[i, j]:
                ax.add_patch(plt.Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, hatch="///", edgecolor="grey", lw=0))
            if big:
                if mark:
                    ax.text(j, i, mark, ha="center", va="center", fontsize=fs, color="black")
                continue
            colour = "dimgrey" if fade[i, j] else ("white" if finite[i, j] and abs(v) > 0.6 else "black")
            ax.text(
                j,
                i,
                label,
                ha="center",
                va="center",
                fontsize=fs,
                color=colour,
                fontweight="bold" if general else "normal",
            )
        side = panel_inches(len(names))
        label_fs = max(3.0, min(9.0, 0.8 * 72 * (side - 1.5) / max(k, 1)))
        ax.set_xticks(range(k), cnames, rotation=90 if big else 45, ha="center" if big else "right", fontsize=label_fs)
        ax.set_yticks(range(k), rnames, fontsize=label_fs)
        ax.set_xlim(-0.5, k - 0.5)
        ax.set_ylim(k - 0.5, -0.5)
        for spine in ax.spines.values():
            spine.set_visible(False)
        n_models = int(pd.to_numeric(rows["n_models_consensus"], errors="coerce").max())
        counts = rows["verdict"].value_counts()
        tally = ", ".join(f"{n} {w}" for w, n in counts.items())
        if n_models == 2:
            tally += " (2 models: nothing can be said of a further model, so no sign in nearly every model)"
        a = f"{alpha:g}" if alpha is not None else "alpha"
        nz = f"{near_zero:g}" if near_zero is not None else "near_zero"
        where = f" ({group})" if group not in ("", "all runs") else ""
        ax.set_title(
            f"in-domain {in_domain}{where}: consensus of {n_models} models ({method}, {residualiser})\n"
            f"framed bold: the sign in nearly every model (the other sign in under 2.5 % of such models); "
            f"plain: the sign on average ({rows['correction'].iloc[0]} across pairs, {a});\n"
            f"±: sign reversal; ≠: models differ; ≈0: near zero (±{nz}); faded: unresolved\n{tally}",
            fontsize=8,
        )
    fig.colorbar(
        mpl.cm.ScalarMappable(norm=norm, cmap=cmap), ax=axes, shrink=0.8, label="consensus partial r across models"
    )
    save(fig, out_png, tight=n_names <= TEXT_LIMIT)
    return cells


FOREST_CAP = 50  # oodcorr analyse draws at most this many forest plots per in-domain set (--forest-max)


def forest_pairs(agree: pd.DataFrame, in_domain: str, method: str, residualiser: str, cap: int = FOREST_CAP):
    """The OOD pairs (x, y) of one in-domain set whose forest plots are drawn, and how many it has:
    all of them up to ``cap``, else the ``cap`` whose verdicts say most first (in the order of
    :data:`oodcorr.analysis.consensus.VERDICTS`: sign reversal, the sign in nearly every model, on
    average, models differ, agree near zero, unresolved), then by the size of the consensus."""
    sub = agree[
        (agree["method"] == method)
        & (agree["residualiser"] == residualiser)
        & (agree["in_domain"].astype(str) == str(in_domain))
    ]
    rank = verdict_rank
    best = {}
    for row in sub.itertuples(index=False):
        key = tuple(sorted((str(row.x), str(row.y))))
        size = abs(float(row.r_consensus)) if np.isfinite(float(row.r_consensus)) else -1.0
        score = (rank(str(row.verdict)), -size)
        best[key] = min(best.get(key, score), score)
    pairs = sorted(best, key=lambda k: (best[k], k))
    return sorted(pairs[:cap]), len(pairs)


def _natural(name: str) -> list:
    """A sort key that puts ``m2`` before ``m10``."""
    return [(0, int(t), "") if t.isdigit() else (1, 0, t) for t in re.split(r"(\d+)", name) if t]


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
    """Why one OOD pair got its verdict: a forest plot. One row per model -- its pooled partial r
    with its interval (a square and a line), its runs as small dots where it has several -- then
    the consensus across models with its interval (a diamond), the prediction interval for a
    further model (a bar below it) and the tolerance bounds that hold 97.5 % of models of this kind
    (a line with end marks, below that), which "in nearly every model" reads; 0 and the near-zero band
    marked; the verdict in the title.
    One panel per pool group. Returns {pool_group: {"models": [...], "verdict": ..., ...}}."""
    plt = pyplot()

    def pair_rows(df):
        xs, ys = df["x"].astype(str), df["y"].astype(str)
        return df[
            (df["method"] == method)
            & (df["residualiser"] == residualiser)
            & (df["in_domain"].astype(str) == str(in_domain))
            & (((xs == x) & (ys == y)) | ((xs == y) & (ys == x)))
        ]

    arows, prows = pair_rows(agree), pair_rows(pc)
    groups = sorted(arows["pool_group"].astype(str).unique()) or [""]
    models = sorted(prows["model"].astype(str).unique(), key=_natural)
    height = 1.9 + 0.32 * (len(models) + 4)
    fig, axes = plt.subplots(1, len(groups), figsize=(7.5 * len(groups), height), squeeze=False)
    out = {}
    lvl = f"{100 * level:g} % " if level else ""
    for ax, group in zip(axes[0], groups):
        a = arows[arows["pool_group"].astype(str) == group]
        p = prows[prows["pool_group"].astype(str) == group]
        pooled = p[p["run"] == "pooled"].set_index(p.loc[p["run"] == "pooled", "model"].astype(str))
        runs = p[p["run"] != "pooled"]
        ys = {m: len(models) - i + 2 for i, m in enumerate(models)}  # top to bottom; consensus rows at 1, 0, -1
        ax.axvline(0, color="black", lw=0.8)
        if near_zero:
            ax.axvspan(-near_zero, near_zero, color="0.92", zorder=0)
        drawn = []
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
            label = "n/a"
            if np.isfinite(lo) and np.isfinite(hi):
                ax.plot([lo, hi], [yy, yy], color="black", lw=1.2, zorder=3)
                label = f"{r:+.2f} [{lo:+.2f}, {hi:+.2f}]"
            elif np.isfinite(r):
                label = f"{r:+.2f} (no interval)"
            if np.isfinite(r):
                ax.plot([r], [yy], "s", ms=6, color="black", zorder=4)
                drawn.append(m)
            ax.text(1.04, yy, label, va="center", fontsize=8, transform=ax.get_yaxis_transform())
        verdict, n_models, tally = "no agreement row", 0, {}
        if len(a):
            row = a.iloc[0]
            verdict = str(row["verdict"])
            rc, lo, hi = (float(row[c]) for c in ("r_consensus", "ci_low_consensus", "ci_high_consensus"))
            plo, phi = float(row["pi_low_consensus"]), float(row["pi_high_consensus"])
            n_models = int(row["n_models_consensus"]) if np.isfinite(float(row["n_models_consensus"])) else 0
            if np.isfinite(rc) and np.isfinite(lo) and np.isfinite(hi):
                ax.fill([lo, rc, hi, rc], [1, 1.3, 1, 0.7], color="tab:red", zorder=4)
                cons = f"{rc:+.2f} [{lo:+.2f}, {hi:+.2f}]"
            elif np.isfinite(rc):
                ax.plot([rc], [1], "D", color="tab:red", zorder=4)
                cons = f"{rc:+.2f}"
            else:
                cons = "n/a"
            ax.text(1.04, 1, cons, va="center", fontsize=8, color="tab:red", transform=ax.get_yaxis_transform())
            if np.isfinite(plo) and np.isfinite(phi):
                ax.plot([plo, phi], [0, 0], color="tab:red", lw=3, solid_capstyle="butt", alpha=0.6, zorder=3)
                pi = f"[{plo:+.2f}, {phi:+.2f}]"
            else:
                pi = "none (fewer than 3 models)" if n_models < 3 else "n/a"
            ax.text(1.04, 0, pi, va="center", fontsize=8, color="tab:red", transform=ax.get_yaxis_transform())
            tlo, thi = (float(row.get(c, np.nan)) for c in ("tol_low_consensus", "tol_high_consensus"))
            if np.isfinite(tlo) and np.isfinite(thi):
                ax.plot([tlo, thi], [-1, -1], color="tab:red", lw=1.2, marker="|", ms=10, zorder=3)
                tol = f"[{tlo:+.2f}, {thi:+.2f}]"
            else:
                tol = "none (fewer than 3 models)" if n_models < 3 else "n/a"
            ax.text(1.04, -1, tol, va="center", fontsize=8, color="tab:red", transform=ax.get_yaxis_transform())
            tally = {"consensus": cons, "prediction": pi, "tolerance": tol}
        ax.axhline(1.75, color="0.6", lw=0.6)
        ax.set_yticks(
            [ys[m] for m in models] + [1, 0, -1],
            [*models, f"consensus of {n_models} models", "prediction interval\n(a further model)"]
            + ["97.5 % of models\n(tolerance)"],
            fontsize=8 if len(models) <= 24 else 6,
        )
        ax.set_ylim(-1.8, len(models) + 2.8)
        ax.set_xlim(-1.02, 1.02)
        ax.set_xlabel(
            f"partial r ({method}, {residualiser}); squares: each model pooled, dots: its runs, lines: {lvl}intervals"
            + (f"; grey band: near zero (±{near_zero:g})" if near_zero else ""),
            fontsize=8,
        )
        where = f" ({group})" if group not in ("", "all runs") else ""
        ax.set_title(
            f"{x} × {y}, in-domain {in_domain}{where}\nverdict: {verdict}",
            fontsize=10,
            fontweight="bold" if verdict_style(str(verdict))["bold"] else "normal",
        )
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
        out[group] = {"models": drawn, "verdict": verdict, **tally}
    # margins in inches for the two-line title and the axis label instead of a tight_layout pass (a
    # second layout of every text); the tight bounding box of the save takes in the labels either side
    fig.subplots_adjust(top=1 - 0.6 / height, bottom=0.55 / height)
    save(fig, out_png)
    return out
