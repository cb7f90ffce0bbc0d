"""How often each verdict across models is right: the calibration of agreement.csv's verdicts.

Simulated studies shaped like the paper's -- models x runs x checkpoints, each run an in-domain
learning curve and OOD scores whose residuals are AR(1) (or a random walk, or AR(1) plus a
trend of their own), each model with its own partial correlation -- are analysed with the
analysis' own procedures (oodcorr.analysis.analyse, then oodcorr.analysis.agreement), and the
verdict of the pair (ood0, ood1) is counted (oodcorr.analysis.simulate.runs.verdict_rates). Seeded:
a rerun gives the same numbers.

    .venv/bin/python benchmarks/verdict_calibration.py --out benchmarks/latest/verdict_calibration.json \\
        [--pythia /tmp/pythia.csv]

Sections (benchmarks/README.md#10-verdicts-across-models-calibration):

* ``targets``: 6 models x 3 runs x 21 checkpoints, AR(1) phi 0.5, the four scenarios of the
  targets (null; every model -0.5; half +0.6, half -0.6; spread around 0);
* ``regimes``: the same verdicts at phi 0.8, with runs that differ within a model, with
  random-walk and trending residuals, and in the shape of the Pythia table (16 models x 1 run
  x 27 checkpoints, phi 0.8), including a spread that sits mostly below 0;
* ``family``: 6 OOD testsets (15 pairs) under the null, the share of tables with any claim;
* ``reversal_ablation``: the sign-reversal test as it was (each model's Hartung-Knapp pooled
  p-value, Bonferroni over models) and its parts changed one at a time, on the same studies;
* ``at_cap``: per run, how often a residual series' AR(1) estimate reaches its cap, and the
  size and coverage of those cells;
* ``real``: with ``--pythia`` (benchmarks/pythia_table.py builds it), the same per-run
  summaries on the real table beside the simulated studies of its shape.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import math
import platform
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from oodcorr.analysis import Options, agreement, analyse
from oodcorr.analysis.across.agreement_table import run_arrays
from oodcorr.analysis.across.consensus import model_means_batch
from oodcorr.analysis.across.multitest import simes
from oodcorr.analysis.cell.inference import PHI_MAX
from oodcorr.analysis.simulate.runs import scenario, study_table, verdict_rates
from oodcorr.core.answer import states_a_sign

OPTS = Options(pool_by=())
NO_CLAIM = ("unresolved", "agree near zero", "fewer than 2 models tested", "no data")


def _saying(v: dict, words: str) -> float:
    """The share of studies whose verdict holds ``words``."""
    return sum(share for verdict, share in v.items() if words in verdict)


def _a_sign(v: dict) -> float:
    return sum(share for verdict, share in v.items() if states_a_sign(verdict))


def _reversal_variants(table, row, pc) -> dict:
    """Whether one study's sign reversal is found, four ways: each model's p-value from its pooled
    row (Hartung-Knapp across its own runs, as before) or from the agreement's model test (the
    between-run variance shared by the models), combined over the models by Bonferroni or by
    Simes (the shipped test is the last)."""
    pair = pc[(pc["x"] == "ood0") & (pc["y"] == "ood1")]
    pooled = pair[pair["run"] == "pooled"]
    runs = pair[pair["run"] != "pooled"]

    def both_sides(r, p, combine):
        ok = np.isfinite(r) & np.isfinite(p)
        one_pos = np.where(r[ok] > 0, p[ok] / 2, 1 - p[ok] / 2)
        return max(combine(one_pos), combine(1 - one_pos)) if len(one_pos) else math.nan

    def bonferroni(p):
        return min(1.0, len(p) * float(p.min()))

    # the model test the agreement reads (one study: this pair's runs, as the agreement table makes them)
    Z, V, P, mask, _, _ = run_arrays(runs.reset_index(drop=True), np.zeros(len(runs), int), 1)
    zm, _, pm, *_ = model_means_batch(Z, V, mask, P)
    zm, pm = zm[0], pm[0]
    pr, pp = pooled["r"].to_numpy(float), pooled["p"].to_numpy(float)
    ps = {
        "hk_bonferroni (as before)": both_sides(pr, pp, bonferroni),
        "hk_simes": both_sides(pr, pp, simes),
        "borrowed_bonferroni": both_sides(zm, pm, bonferroni),
        "borrowed_simes (shipped)": float(row["p_reversal"]),
    }
    return {k: bool(v < OPTS.alpha) for k, v in ps.items()}


def _cap_summary(runs: pd.DataFrame) -> dict:
    """Per-run cells: share with an AR(1) estimate at its cap; their size and coverage of 0
    (every study here has a true partial correlation of 0)."""
    runs = runs[np.isfinite(runs["r"].astype(float))]
    cap = (runs["phi_x"] >= PHI_MAX) | (runs["phi_y"] >= PHI_MAX)
    p = runs["p"].astype(float)
    lo, hi = runs["ci_low"].astype(float), runs["ci_high"].astype(float)
    covers = (lo.fillna(-1) <= 0) & (hi.fillna(1) >= 0)

    def share(mask):
        return float(mask.mean()) if len(mask) else math.nan

    return {
        "cells": int(len(runs)),
        "at_cap": share(cap),
        "size": share(p < 0.05),
        "size_at_cap": share((p < 0.05)[cap]),
        "coverage_at_cap": share(covers[cap]),
        "median_phi": float(pd.concat([runs["phi_x"], runs["phi_y"]]).median()),
        "median_n_eff": float(runs["n_eff"].median()),
        "unresolved": share(runs["conclusion"] == "unresolved"),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--reps", type=int, default=400, help="studies per scenario of the targets (default 400)")
    ap.add_argument("--reps-regimes", type=int, default=200, help="studies per scenario elsewhere (default 200)")
    ap.add_argument("--pythia", type=Path, help="the real table from benchmarks/pythia_table.py (optional)")
    args = ap.parse_args(argv)
    logging.disable(logging.WARNING)  # "no run information column": every study is one pool group
    t0 = time.time()
    out: dict = {
        "machine": platform.platform(),
        "python": sys.version.split()[0],
        "options": OPTS.describe(),
        "reps": args.reps,
    }

    # ---- the targets: 6 models x 3 runs x 21 checkpoints, phi 0.5 ---------------------------
    M, K, N, PHI = 6, 3, 21, 0.5
    cases = {
        "null": scenario("null", M),
        "same -0.5": scenario("same", M, -0.5),
        "half +-0.6": scenario("half", M, 0.6),
        "spread around 0": scenario("spread", M, 0.5),
    }
    targets = {}
    for name, rhos in cases.items():
        keep = _reversal_variants if name in ("null", "same -0.5", "half +-0.6") else None
        res = verdict_rates(rhos, K, N, PHI, args.reps, seed=23, opts=OPTS, keep=keep)
        if keep:
            kept = res.pop("kept")
            res["reversal_ablation"] = {k: float(np.mean([d[k] for d in kept])) for k in kept[0]}
        targets[name] = res
        print(f"[{time.time() - t0:6.0f} s] targets {name}: {res['verdicts']}", flush=True)
    v = {k: t["verdicts"] for k, t in targets.items()}
    checks = {
        "false sign, null (<= 0.05)": _a_sign(v["null"]),
        "false sign, spread around 0 (<= 0.05)": _a_sign(v["spread around 0"]),
        "false nearly every model, spread (<= 0.05)": _saying(v["spread around 0"], "in nearly every model"),
        "false sign reversal, null (<= 0.05)": _saying(v["null"], "sign reversal"),
        "false sign reversal, same sign (<= 0.05)": _saying(v["same -0.5"], "sign reversal"),
        "negative stated, every model -0.5 (>= 0.90)": _saying(v["same -0.5"], "negative"),
        "negative in nearly every model, every model -0.5 (>= 0.51)": _saying(
            v["same -0.5"], "negative in nearly every model"
        ),
        "sign reversal, half +-0.6 (>= 0.60)": _saying(v["half +-0.6"], "sign reversal"),
    }
    limits = {k: (float(k.split("(")[-1].split()[1].rstrip(")")), k.split("(")[-1].split()[0]) for k in checks}
    out["targets"] = {
        "grid": {"models": M, "runs": K, "checkpoints": N, "phi": PHI},
        "scenarios": targets,
        "checks": {
            k: {"value": val, "met": bool(val <= lim if op == "<=" else val >= lim)}
            for (k, val), (lim, op) in zip(checks.items(), limits.values())
        },
    }
    out["reversal_ablation"] = {
        name: targets[name].pop("reversal_ablation") for name in ("null", "same -0.5", "half +-0.6")
    }
    print(f"[{time.time() - t0:6.0f} s] ablation {out['reversal_ablation']}", flush=True)

    # ---- other regimes ----------------------------------------------------------------------
    R = args.reps_regimes
    regimes = [
        ("phi 0.8", dict(n_runs=3, n_checkpoints=21, phi=0.8), {}),
        ("runs differ (sd 0.3 in z)", dict(n_runs=3, n_checkpoints=21, phi=0.5), {"run_sd": 0.3}),
        ("random-walk residuals", dict(n_runs=3, n_checkpoints=21, phi=0.5), {"series": "drift"}),
        ("trending residuals", dict(n_runs=3, n_checkpoints=21, phi=0.5), {"series": "trend"}),
    ]
    out["regimes"] = {}
    at_cap = {}
    for label, grid, study in regimes:
        row = {}
        for name in ("null", "same -0.5", "half +-0.6", "spread around 0"):
            if study.get("series") in ("drift", "trend") and name != "null":
                continue  # no single true partial correlation for a nonstationary noise: size only
            # per run, the cap's calibration needs runs whose own correlation is 0 (not so when runs differ)
            per_run_null = name == "null" and not study.get("run_sd")
            keep = (lambda t, a, pc: pc[pc["run"] != "pooled"]) if per_run_null else None
            res = verdict_rates(cases[name], seed=29, opts=OPTS, reps=R, keep=keep, **grid, **study)
            if keep:
                at_cap[label] = _cap_summary(pd.concat(res.pop("kept"), ignore_index=True))
            row[name] = res
            print(f"[{time.time() - t0:6.0f} s] {label} {name}: {res['verdicts']}", flush=True)
        out["regimes"][label] = row
    pythia_shape = dict(n_runs=1, n_checkpoints=27, phi=0.8)
    row = {}
    for name, rhos in {
        "null": scenario("null", 16),
        "same -0.5": scenario("same", 16, -0.5),
        "spread around 0": scenario("spread", 16, 0.5),
        "spread mostly below 0": scenario("spread-off-zero", 16, 0.5),
    }.items():
        keep = (lambda t, a, pc: pc[pc["run"] != "pooled"]) if name == "null" else None
        res = verdict_rates(rhos, seed=31, opts=OPTS, reps=R, keep=keep, **pythia_shape)
        if keep:
            at_cap["Pythia shape (16 x 1 x 27, phi 0.8)"] = _cap_summary(pd.concat(res.pop("kept"), ignore_index=True))
        row[name] = res
        print(f"[{time.time() - t0:6.0f} s] Pythia shape {name}: {res['verdicts']}", flush=True)
    out["regimes"]["Pythia shape (16 models x 1 run x 27, phi 0.8)"] = row

    # ---- the family-wise guarantee across the pairs of a table --------------------------------
    fam = {}
    for name, rhos in (("null", scenario("null", M)), ("every model -0.15", scenario("same", M, -0.15))):
        anyclaim, per_pair = 0, {}
        for i in range(R):
            table = study_table(np.random.default_rng([37, i]), rhos, K, N, PHI, n_ood=6)
            a = agreement(analyse(table, OPTS), OPTS.alpha, OPTS.agreement_correction, OPTS.level, OPTS.near_zero)
            anyclaim += bool((~a["verdict"].isin(NO_CLAIM)).any())
            for word, n in a["verdict"].value_counts().items():
                per_pair[word] = per_pair.get(word, 0) + n / len(a)
        fam[name] = {
            "pairs": 15,
            "tables_with_any_claim": anyclaim / R,
            "verdicts": {k: v / R for k, v in per_pair.items()},
        }
        print(f"[{time.time() - t0:6.0f} s] family {name}: {fam[name]}", flush=True)
    out["family"] = fam
    out["at_cap"] = at_cap

    # ---- the real table beside its simulated shape -------------------------------------------
    if args.pythia:
        long = pd.read_csv(args.pythia).rename(columns={"step": "unit", "accuracy": "score"})
        long["in_domain"] = "lambada_openai"
        long["run"] = long["model"]
        pc = analyse(long[["model", "in_domain", "run", "unit", "testset", "score"]], OPTS)
        real = _cap_summary(pc[pc["run"] != "pooled"])
        a = agreement(pc, OPTS.alpha, OPTS.agreement_correction, OPTS.level, OPTS.near_zero)
        real["verdicts"] = a["verdict"].value_counts().to_dict()
        real["median_tau2_models"] = float(a["tau2_models"].median())
        digest = hashlib.sha256(args.pythia.read_bytes()).hexdigest()
        out["real"] = {"pythia": real, "input_sha256": digest, "note": "size: the share of cells with p < 0.05"}
        print(f"[{time.time() - t0:6.0f} s] real {real}", flush=True)
    out["seconds"] = round(time.time() - t0, 1)
    args.out.write_text(json.dumps(out, indent=1, default=float) + "\n")
    for k, c in out["targets"]["checks"].items():
        print(f"{k}: {c['value']:.3f} {'met' if c['met'] else 'MISSED'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
