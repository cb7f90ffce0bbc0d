"""The real configs' scores as measurements (issue 44 item 6): each testset's item noise and
reliability, and which answers change against the analysis before item noise was modelled.

Reads a finished run of a real config (``results/<experiment>/``: the scores table, the per-example
predictions it names, and ``analysis/``, the workflow's tables) and prints Markdown tables:

* each testset's item noise per run, from its per-item correctness
  (:func:`oodcorr.analysis.items.item_noise.item_matrices` and
  :func:`~oodcorr.analysis.items.item_noise.noise_summary`):
  items, the noise's sd at a checkpoint, its correlation between neighbouring checkpoints, the
  share of items neighbouring checkpoints disagree on; beside them the sd of the observed residual
  series after the in-domain score, and the reliabilities of the workflow's ``partial_correlations.csv``
  and ``agreement.csv``;
* every pair's answer (Pearson and Spearman, each residualiser): per run, the observed ``r`` and its
  conclusion, ``r_eiv`` and ``r_corrected`` (Pearson); the verdict of ``agreement.csv`` now and as
  the analysis before issue 44 gave it on the same scores (``--old``: the tables ``analyse`` below
  writes with that version's code).

``analyse`` runs the analysis exactly as the workflow's rule ``partial_correlations`` does (the
config's ``analysis`` section, the per-example predictions read), with whichever ``oodcorr`` is
importable, so the commit before issue 44 runs it too::

    git worktree add ../oodcorr-bfe79fc bfe79fc   # the analysis before issue 44
    PYTHONPATH=../oodcorr-bfe79fc/src .venv/bin/python benchmarks/real_item_noise.py analyse \\
        --configfile config/real-cpu.yaml --out /tmp/real-cpu-bfe79fc
    .venv/bin/python benchmarks/real_item_noise.py report --configfile config/real-cpu.yaml \\
        --old /tmp/real-cpu-bfe79fc

(``analyse`` with this checkout's code and ``--out`` elsewhere reproduces the workflow's tables:
a check that the comparison runs the workflow's analysis.) Tables:
benchmarks/README.md#16-scores-as-measurements-item-noise.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from oodcorr.analysis import Options, agreement, analyse

try:
    from oodcorr.analysis.readers.workflow_scores import (
        example_bootstrap_applies,
        examples_from_predictions,
        from_scores,
    )
    from oodcorr.analysis.results import write_tables
except ImportError:  # the code before issue 45 (e.g. bfe79fc, which `analyse` above runs) had them in tables
    from oodcorr.analysis.readers.workflow_scores import (
        example_bootstrap_applies,
        examples_from_predictions,
        from_scores,
    )
    from oodcorr.analysis.results import write_tables
from oodcorr.core.defaults import ANALYSIS, filled
from oodcorr.jobs.aggregate_scores import read_scores
from oodcorr.planning.config import analysis_options


def _config(path: str) -> dict:
    with open(path, encoding="utf-8") as f:
        return yaml.safe_load(f)


def _root(cfg: dict, configfile: str) -> Path:
    return Path("results") / (cfg.get("experiment") or Path(configfile).stem)


def run_analysis(configfile: str, out: Path) -> None:
    """The workflow's rule ``partial_correlations`` on ``results/<experiment>/scores.parquet``."""
    cfg = _config(configfile)
    section = filled(cfg.get("analysis"), ANALYSIS)
    opts = Options.from_mapping(analysis_options(section))
    score = section["score"]
    scores = read_scores(str(_root(cfg, configfile) / "scores.parquet"))
    long, info = from_scores(scores, score)
    examples = examples_from_predictions(scores) if example_bootstrap_applies(score) else None
    pc = analyse(long, opts, examples, ordered=True, run_info=info, workers=1)
    agree = agreement(pc, opts.alpha, opts.agreement_correction, opts.level, opts.near_zero)
    out.mkdir(parents=True, exist_ok=True)
    write_tables(pc, agree, out)
    print(f"wrote {out}/partial_correlations.csv and {out}/agreement.csv", file=sys.stderr)


def _ci(r, lo, hi) -> str:
    """``r [lo, hi]``; an interval without its estimate as ``(none) [lo, hi]``, so that it shows."""
    inner = f" [{float(lo):+.2f}, {float(hi):+.2f}]" if math.isfinite(float(lo)) and math.isfinite(float(hi)) else ""
    if not math.isfinite(float(r)):
        return f"(none){inner}" if inner else ""
    return f"{float(r):+.2f}{inner}"


def _rel(v, lo) -> str:
    v, lo = float(v), float(lo)
    if math.isfinite(v):
        return f"{v:.2f}" + (f" (≥ {lo:.2f})" if math.isfinite(lo) else "")
    return f"≥ {lo:.2f}" if math.isfinite(lo) else ""


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def noise_table(root: Path, pc: pd.DataFrame) -> str:
    """Each testset's item noise and reliability, per run, from its per-item correctness and the
    workflow's Pearson/linear cells."""
    # here, not at the top: `analyse` runs with the code before issue 44, which has no item_noise
    from oodcorr.analysis.cell.residualise import linear_maker
    from oodcorr.analysis.items.item_noise import item_covariance, item_matrices, noise_summary

    scores = read_scores(str(root / "scores.parquet"))
    examples = examples_from_predictions(scores)
    lin = pc[(pc["method"] == "pearson") & (pc["residualiser"] == "linear") & (pc["run"] != "pooled")]
    wide = scores.pivot_table(index=["run_id", "step"], columns="testset", values="accuracy")
    rows = []
    for (model, run), ex in examples.groupby(["model", "run"], sort=True):
        units = sorted(ex["unit"].unique())
        mats, problems = item_matrices(ex, units)
        cells = lin[(lin["model"] == model) & (lin["run"].astype(str) == str(run))]
        zname = str(cells["in_domain"].iloc[0])
        series = wide.loc[run].reindex(units)
        z = series[zname].to_numpy(float)
        R = linear_maker(z[:, None])  # the observed residual maker: intercept and the in-domain score
        T = len(units)
        short = str(run).split("/")[-1]
        for ts in [zname, *sorted(t for t in mats if t != zname)]:
            if ts not in mats:
                rows.append([short, ts, problems.get(ts, "no per-item record"), *[""] * 7])
                continue
            s = noise_summary(mats[ts])
            S = item_covariance(mats[ts])
            if ts == zname:
                c = cells.iloc[0]
                P = np.eye(T) - 1.0 / T  # the in-domain series: its mean removed
                resid = math.sqrt(float(z @ P @ z) / (T - 1))
                noise_resid = math.sqrt(float(np.trace(P @ S @ P)) / (T - 1))
                rel = _rel3(c, "reliability_in_domain")
            else:
                x = series[ts].to_numpy(float)
                resid = math.sqrt(float((R @ x) @ (R @ x)) / (T - 2))
                noise_resid = math.sqrt(max(float(np.trace(R @ S @ R)), 0.0) / (T - 2))
                c = cells[cells["x"] == ts]
                side = "x"
                if c.empty:
                    c, side = cells[cells["y"] == ts], "y"
                rel = _rel3(c.iloc[0], f"reliability_{side}")
            rows.append(
                [
                    short,
                    ts + (" (in-domain)" if ts == zname else ""),
                    str(s["items"]),
                    f"{s['noise_sd']:.3f}",
                    f"{s['noise_lag1']:.2f}",
                    f"{100 * s['disagreement']:.0f} %",
                    _stretches(mats[ts]),
                    f"{resid:.3f}",
                    f"{noise_resid:.3f}",
                    rel,
                ]
            )
    header = [
        "run",
        "testset",
        "items",
        "noise sd at a checkpoint",
        "its lag-1 correlation",
        "items neighbours disagree on",
        "the same: the first two pairs, the last two; without the first checkpoint",
        "residual sd",
        "noise sd in the residual",
        "reliability [95 %]",
    ]
    return _table(header, rows)


def _half_reliability(mat, labels, R, obs, rng, splits: int = 400) -> tuple[float, float]:
    """The reliability from the product of two halves' residual series (what the analysis reads,
    over 8 random halvings), over ``splits`` halvings: the items split at random, and split within
    each label (the halves then have the label composition of the whole)."""
    n = mat.shape[1]
    out = []
    for within in (False, True):
        prods = []
        for _ in range(splits):
            if within:
                parts = [rng.permutation(np.flatnonzero(labels == lab)) for lab in sorted(set(labels))]
                a = np.concatenate([p[: len(p) // 2] for p in parts])
                b = np.concatenate([p[len(p) // 2 :] for p in parts])
            else:
                perm = rng.permutation(n)
                a, b = perm[: n // 2], perm[n // 2 :]
            prods.append((R @ mat[:, a].mean(1)) @ (R @ mat[:, b].mean(1)))
        out.append(float(np.mean(prods) / obs))
    return out[0], out[1]


def noise_checks(root: Path) -> str:
    """Whether a residual series is within its item noise, and what a label-stratified sample's
    noise is. Per run and OOD testset: the residual series' sum of squares after the in-domain score
    (observed); the item noise's expected share of it (``tr(R Sigma R)``) with the items as
    independent draws (:func:`~oodcorr.analysis.items.item_noise.item_covariance`, the analysis'
    estimate) and within each label (``sum_h (n_h / n)^2 Sigma_h``: the workflow's capped testsets
    are sampled stratified by label, jobs/prepare_dataset.py's stratified_sample), each with the chance that
    item noise alone (Gaussian with that covariance, 20,000 draws, seed 0) gives a residual series
    as small as observed; the reliability from two halves' residual products, the halves random
    (as the analysis splits them) and within each label, 400 halvings each; the range of the share
    of items predicted entailment over the checkpoints."""
    from oodcorr.analysis.cell.residualise import linear_maker
    from oodcorr.analysis.items.item_noise import item_covariance

    scores = read_scores(str(root / "scores.parquet"))
    rng = np.random.default_rng(0)
    rows = []
    for run, g in scores.groupby("run_id", sort=True):
        steps = sorted(g["step"].unique())
        wide = g.pivot(index="step", columns="testset", values="accuracy").reindex(steps)
        zname = str(g["in_domain"].iloc[0])
        R = linear_maker(wide[zname].to_numpy(float)[:, None])
        for ts in sorted(set(g["testset"]) - {zname}):
            files = g[g["testset"] == ts].sort_values("step")["predictions"]
            cols = ["index", "label", "pred", "correct"]
            preds = [pd.read_parquet(f, columns=cols).sort_values("index") for f in files]
            mat = np.array([p["correct"].to_numpy(float) for p in preds])
            labels = preds[0]["label"].to_numpy()
            n = mat.shape[1]
            x = wide[ts].to_numpy(float)
            obs = float((R @ x) @ (R @ x))
            cells = [str(run).split("/")[-1], ts, f"{obs:.2e}"]
            within = sum(
                (np.sum(labels == lab) / n) ** 2 * item_covariance(mat[:, labels == lab]) for lab in set(labels)
            )
            for S in (item_covariance(mat), within):
                L = np.linalg.cholesky(S + 1e-12 * np.eye(len(S)))
                e = rng.standard_normal((20000, len(S))) @ L.T @ R.T
                q = np.einsum("kt,kt->k", e, e)
                cells += [f"{np.trace(R @ S @ R):.2e}", f"{np.mean(q <= obs):.3f}"]
            cells += [f"{v:+.2f}" for v in _half_reliability(mat, labels, R, obs, rng)]
            share = [float((p["pred"] == "entailment").mean()) for p in preds]
            cells.append(f"{min(share):.2f}–{max(share):.2f}")
            rows.append(cells)
    header = [
        "run",
        "testset",
        "residual sum of squares",
        "its item noise, items independent",
        "P(noise alone ≤ it)",
        "its item noise, within labels",
        "P(noise alone ≤ it), within labels",
        "reliability, random halves",
        "reliability, halves within labels",
        "share predicted entailment",
    ]
    return _table(header, rows)


def _stretches(mat: np.ndarray) -> str:
    """The share of items neighbouring checkpoints disagree on, pair by pair at both ends, and its
    mean without the first checkpoint (a learning curve flips most items early)."""
    d = np.nanmean(np.abs(np.diff(mat, axis=0)), axis=1)
    pct = [f"{100 * v:.0f}" for v in d]
    return f"{', '.join(pct[:2])} … {', '.join(pct[-2:])} %; {100 * np.mean(d[1:]):.0f} %"


def _rel3(row, col: str) -> str:
    est, lo, hi = (float(row[f"{col}{s}"]) for s in ("", "_low", "_high"))
    if math.isfinite(est):
        return f"{est:.2f} [{lo:.2f}, {hi:.2f}]" if math.isfinite(lo) else f"{est:.2f}"
    return f"≥ {lo:.2f}" if math.isfinite(lo) else ""


def pooled_reliability(agree: pd.DataFrame) -> str:
    """Each testset's reliability as agreement.csv gives it (pooled over runs and models), Pearson/linear."""
    a = agree[(agree["method"] == "pearson") & (agree["residualiser"] == "linear")]
    got: dict[str, tuple[float, float]] = {}
    for _, row in a.iterrows():
        for side in ("x", "y"):
            got.setdefault(row[side], (row[f"reliability_{side}"], row[f"reliability_{side}_low"]))
    first = a.iloc[0]
    rows = [
        [f"{first['in_domain']} (in-domain)", _rel(first["reliability_in_domain"], first["reliability_in_domain_low"])]
    ]
    rows += [[ts, _rel(*v)] for ts, v in sorted(got.items())]
    return _table(["testset", "reliability (≥ its low end)"], rows)


def _key(df: pd.DataFrame, run: bool = False) -> pd.Series:
    k = df["x"] + "+" + df["y"] + " " + df["method"] + "/" + df["residualiser"]
    return k + " " + df["run"].astype(str) if run else k


def changed_cells(pc: pd.DataFrame, old: pd.DataFrame) -> str:
    """How many cells' observed r or conclusion differ from the analysis before issue 44."""
    o = old.assign(k=_key(old, True)).set_index("k")
    n = pc.assign(k=_key(pc, True)).set_index("k")
    common = n.index.intersection(o.index)
    dr = (n.loc[common, "r"].astype(float) - o.loc[common, "r"].astype(float)).abs()
    conc = (n.loc[common, "conclusion"].fillna("") != o.loc[common, "conclusion"].fillna("")).sum()
    return (
        f"cells (every run and pooled row, method, residualiser): {len(n)} now, {len(o)} before, {len(common)} "
        f"in both; largest |r now - r before| {dr.max():.2g}; conclusions that differ: {int(conc)}"
    )


def run_table(pc: pd.DataFrame) -> str:
    """Pearson/linear, every pair: each run's observed answer beside the correlations free of the
    in-domain set's noise (r_eiv) and of the testsets' (r_corrected); the pooled row where a
    model has several runs."""
    lin = pc[(pc["method"] == "pearson") & (pc["residualiser"] == "linear")]
    several = lin.groupby("model")["run"].nunique().max() > 2
    if not several:
        lin = lin[lin["run"] != "pooled"]
    rows = []
    for _, c in lin.sort_values(["x", "y", "run"]).iterrows():
        rows.append(
            [
                f"{c['x']} + {c['y']}",
                str(c["run"]).split("/")[-1],
                _ci(c["r"], c["ci_low"], c["ci_high"]),
                str(c["conclusion"]),
                f"{float(c['p_adj']):.2f}",
                _ci(c["r_eiv"], c["ci_low_eiv"], c["ci_high_eiv"]),
                _ci(c["r_corrected"], c["ci_low_corrected"], c["ci_high_corrected"]),
            ]
        )
    header = ["pair", "run", "r [95 %]", "conclusion", "p_adj (Holm)", "r_eiv [95 %]", "r_corrected [95 %]"]
    return _table(header, rows)


def verdict_table(agree: pd.DataFrame, old: pd.DataFrame | None) -> str:
    """Every pair's verdict (Pearson/linear) now and before issue 44, with the consensus each read;
    the other cells' verdicts where they differ from it."""
    olds = old.assign(k=_key(old)).set_index("k") if old is not None else None
    a = agree.assign(k=_key(agree))
    lin = a[(a["method"] == "pearson") & (a["residualiser"] == "linear")].set_index(["x", "y"])
    rows = []
    for _, r in a.sort_values(["method", "residualiser", "x", "y"]).iterrows():
        first = r["method"] == "pearson" and r["residualiser"] == "linear"
        was = str(olds.loc[r["k"], "verdict"]) if olds is not None and r["k"] in olds.index else ""
        if not first:
            ref = lin.loc[(r["x"], r["y"])]
            if r["verdict"] == ref["verdict"] and was == str(olds.loc[ref["k"], "verdict"] if olds is not None else ""):
                continue
        rows.append(
            [
                f"{r['x']} + {r['y']}",
                f"{r['method']}/{r['residualiser']}",
                was,
                str(r["verdict"]),
                _ci(r["r_consensus"], r["ci_low_consensus"], r["ci_high_consensus"]),
                _ci(r["r_consensus_eiv"], r["ci_low_consensus_eiv"], r["ci_high_consensus_eiv"]),
                _ci(r["r_consensus_corrected"], r["ci_low_consensus_corrected"], r["ci_high_consensus_corrected"]),
                "" if pd.isna(r["noise_limited"]) else str(r["noise_limited"]),
                str(r["by_model"]) if "by_model" in r and not pd.isna(r["by_model"]) else "",
            ]
        )
    header = [
        "pair",
        "cell",
        "verdict before issue 44",
        "verdict",
        "r_consensus [95 %]",
        "r_consensus_eiv [95 %]",
        "r_consensus_corrected [95 %]",
        "noise_limited",
        "by_model",
    ]
    return _table(header, rows)


def report(configfile: str, old_dir: str | None, new_dir: str | None = None) -> None:
    cfg = _config(configfile)
    root = _root(cfg, configfile)
    tables = Path(new_dir) if new_dir else root / "analysis"
    pc = pd.read_csv(tables / "partial_correlations.csv")
    agree = pd.read_csv(tables / "agreement.csv")
    old_pc = pd.read_csv(Path(old_dir) / "partial_correlations.csv") if old_dir else None
    old_agree = pd.read_csv(Path(old_dir) / "agreement.csv") if old_dir else None
    print(f"## {root}: each testset's item noise, per run\n")
    print(noise_table(root, pc) + "\n")
    print("## Within its item noise? The noise as the analysis estimates it and within labels\n")
    print(noise_checks(root) + "\n")
    print("## Reliabilities pooled over runs and models (agreement.csv, pearson/linear)\n")
    print(pooled_reliability(agree) + "\n")
    print("## Per run (pearson/linear)\n")
    if old_pc is not None:
        print(changed_cells(pc, old_pc) + "\n")
    print(run_table(pc) + "\n")
    print("## The answer (agreement.csv): verdicts before issue 44 and now\n")
    print(verdict_table(agree, old_agree))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("analyse", help="the workflow's analysis of a finished run, with the importable oodcorr")
    a.add_argument("--configfile", required=True)
    a.add_argument("--out", required=True, type=Path)
    r = sub.add_parser("report", help="Markdown tables of a finished run's item noise and answers")
    r.add_argument("--configfile", required=True)
    r.add_argument("--old", help="the tables `analyse` wrote with the code before issue 44")
    r.add_argument("--new", help="the tables `analyse` wrote with this code (default: the workflow's own analysis)")
    args = ap.parse_args(argv)
    if args.cmd == "analyse":
        run_analysis(args.configfile, args.out)
    else:
        report(args.configfile, args.old, args.new)


if __name__ == "__main__":
    main()
