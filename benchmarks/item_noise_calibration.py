"""Scores as measurements: the answer's error rates, and the tasks' correlation, through item noise.

Every accuracy is a mean over a finite testset that all checkpoints share, the in-domain one too.
This benchmark simulates studies item by item (oodcorr.analysis.simulate.items: items with
difficulties, item-by-checkpoint deviations persistent across checkpoints, each checkpoint's
expected accuracy the task's population accuracy; testsets above 1,000 items by their sufficient
statistics) and measures, per regime, against the truth (the partial correlation of the tasks'
population accuracies given the in-domain ability, ``truth`` in every model):

* the answer's statements (agreement.csv's ``verdict``): a sign stated (and falsely: at truth 0, or
  of the other sign), ``near zero`` stated (falsely at truth +-0.5), ``noise-limited``; beside them
  the answer as it was before item noise was modelled (the observed scores' ladder, the same
  studies);
* the tasks' consensus (``r_consensus_corrected``): its median over studies, the median absolute
  error, the share of intervals covering the truth, the share of studies with no estimate (the noise
  leaves nothing to estimate) and the median reliability of the OOD series and the in-domain one.

Two kinds of data: ``items`` (per-item correctness of every testset, the workflow's own case: the
fast path of the analysis' own functions, oodcorr.analysis.simulate.items.fast_run_rows, then
pooling and the answer as the workflow computes them) and ``sizes`` (only each testset's size: the
full pipeline, oodcorr.analysis.analyse, on the scores with an ``n`` column).

    .venv/bin/python benchmarks/item_noise_calibration.py --out benchmarks/latest/item_noise_calibration.json
    .venv/bin/python benchmarks/item_noise_calibration.py --quick   # a few regimes, to try it

Monte Carlo standard error ``sqrt(p (1 - p) / studies)`` beside every share. Tables:
benchmarks/README.md#16-scores-as-measurements-item-noise.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from itertools import product
from pathlib import Path

import numpy as np
import pandas as pd

from oodcorr.analysis import Options, agreement, analyse
from oodcorr.analysis.cell.inference import modified_tests
from oodcorr.analysis.items.measurement import bounded
from oodcorr.analysis.per_run.measured import exact_maker
from oodcorr.analysis.pipeline import pool
from oodcorr.analysis.simulate.items import fast_run_rows, item_runs

OPTS = Options(pool_by=(), example_boot=0)
T = 25
# (item difficulty share, persistence of the item-by-checkpoint deviation): neighbouring checkpoints
# at accuracy 0.7 disagree on 37 % of items (nearly white: far-apart checkpoints), 12.5 %, 5.7 %
PERSISTENCE = {"white": (0.2, 0.0), "12%": (0.5, 0.8), "6%": (0.7, 0.93)}
MEASURED = (
    "r_eiv",
    "eiv_from",
    "task_cov",
    "task_var_x",
    "task_var_y",
    "eiv_var_x",
    "eiv_var_y",
    "reliability_x",
    "reliability_x_low",
    "reliability_y",
    "reliability_y_low",
    "reliability_in_domain",
    "reliability_in_domain_low",
)


def share(x) -> dict:
    x = np.asarray(x, dtype=float)
    p = float(np.mean(x)) if len(x) else math.nan
    return {"share": p, "se": math.sqrt(p * (1 - p) / len(x)) if len(x) else math.nan}


def _answer(table: pd.DataFrame) -> pd.DataFrame:
    return agreement(table, OPTS.alpha, OPTS.agreement_correction, OPTS.level, OPTS.near_zero)


def _moment_rows(rows: pd.DataFrame, d: dict) -> pd.DataFrame:
    """The candidate not shipped: each run's ``r_eiv`` replaced by the moment correction of the
    in-domain variance by its items' expected noise (``tr(P Sigma P)``, :func:`.measurement.bounded`
    at the estimate instead of the bound), its test the observed series' effective sample size."""
    B, T_, _ = d["scores"].shape
    P = exact_maker(T_, None)
    r = np.array(
        [
            bounded(
                d["scores"][b, :, 0],
                P,
                d["scores"][b, :, 1:],
                np.array([[0, 1]]),
                float(np.trace(P @ d["sigma"][b, 0] @ P)),
            )[0]
            for b in range(B)
        ]
    )
    p, lo, hi, se = modified_tests("pearson", r, rows["n_eff"].to_numpy(float), OPTS.level)
    return rows.assign(r_eiv=r, p_eiv=p, ci_low_eiv=lo, ci_high_eiv=hi, se_z_eiv=se)


def _items_tables(shape, sizes, persistence, truth, studies, seed, moment=False):
    """The run rows and pooled rows of ``studies`` studies (``moment``: with the moment correction
    in place of the cross-fitted correlation)."""
    models, runs = shape
    difficulty, persist = PERSISTENCE[persistence]
    rng = np.random.default_rng([seed, models, runs, *sizes, round(100 * difficulty), round(1000 * truth) + 1000])
    d = item_runs(rng, [truth] * (studies * models * runs), T, sizes, difficulty=difficulty, persistence=persist)
    rows = fast_run_rows(d, models, runs)
    if moment:
        rows = _moment_rows(rows, d)
    return pd.concat([rows, pool(rows, OPTS).assign(significant=False)], ignore_index=True)


def _sizes_table(shape, sizes, persistence, truth, studies, seed):
    """The full pipeline on the scores with each testset's size (no per-item data)."""
    models, runs = shape
    difficulty, persist = PERSISTENCE[persistence]
    rng = np.random.default_rng([seed, models, runs, *sizes, round(100 * difficulty), round(1000 * truth) + 1000, 1])
    d = item_runs(rng, [truth] * (studies * models * runs), T, sizes, difficulty=difficulty, persistence=persist)
    B = d["scores"].shape[0]
    study = np.repeat(np.arange(B) // (models * runs), T * 3)
    model = np.repeat((np.arange(B) // runs) % models, T * 3)
    run = np.repeat(np.arange(B), T * 3)
    names = np.array(["in-domain", "ood0", "ood1"])
    long = pd.DataFrame(
        {
            "model": [f"s{s}-m{m}" for s, m in zip(study, model)],
            "in_domain": [f"s{s}" for s in study],
            "run": run.astype(str),
            "unit": np.tile(np.repeat(np.arange(T), 3), B),
            "testset": np.where(np.tile(names, B * T) == "in-domain", [f"s{s}" for s in study], np.tile(names, B * T)),
            "score": d["scores"].reshape(-1),
            "n": np.tile(np.asarray(sizes, float), B * T),
        }
    )
    pc = analyse(long, OPTS)
    # one table per study in agreement: its in-domain set names it; the models are the study's
    pc["model"] = pc["model"].str.split("-", n=1).str[1]
    return pc


def measure(table: pd.DataFrame, truth: float) -> dict:
    new = _answer(table)
    old = _answer(table.drop(columns=[c for c in MEASURED if c in table.columns]))
    out = {"studies": len(new)}
    for name, ag in (("answer", new), ("observed_answer", old)):
        d = ag["direction"].fillna("")
        sign = np.where(d.str.startswith("positive"), 1, np.where(d.str.startswith("negative"), -1, 0))
        false_sign = (sign != 0) if truth == 0 else (sign == -np.sign(truth))
        v = ag["verdict"]
        near = v.str.contains("near zero")
        out[name] = {
            "sign": share(sign == np.sign(truth)) if truth else share(sign != 0),
            "sign_false": share(false_sign),
            "near": share(near),
            "near_false": share(near) if truth else None,
            "noise_limited": share(v == "noise-limited"),
            "verdicts": {k: float(c) for k, c in v.value_counts(normalize=True).items()},
        }
    r = new["r_consensus_corrected"].to_numpy(float)
    lo, hi = new["ci_low_consensus_corrected"].to_numpy(float), new["ci_high_consensus_corrected"].to_numpy(float)
    fin = np.isfinite(r)
    has = np.isfinite(lo) & np.isfinite(hi)
    out["corrected"] = {
        "median": float(np.median(r[fin])) if fin.any() else math.nan,
        "median_abs_error": float(np.median(np.abs(r[fin] - truth))) if fin.any() else math.nan,
        "empty": share(~fin),
        "coverage": share((lo[has] <= truth) & (truth <= hi[has])) if has.any() else None,
        "interval_width": float(np.median(hi[has] - lo[has])) if has.any() else math.nan,
    }
    out["reliability"] = {
        k: float(np.nanmedian(new[f"reliability_{k}"])) if new[f"reliability_{k}"].notna().any() else math.nan
        for k in ("x", "y", "in_domain")
    }
    out["reliability_low"] = {k: float(np.nanmedian(new[f"reliability_{k}_low"])) for k in ("x", "in_domain")}
    return out


GRIDS = {
    # the principal grid: every testset's items known
    "items": [
        dict(
            shapes=[(3, 3), (12, 1)],
            n_id=[200, 10000],
            n_ood=[71, 300, 3000, 30000],
            persistence=["white", "12%"],
            truth=[0.0, 0.5, -0.5],
        ),
        dict(shapes=[(16, 1)], n_id=[200, 1000], n_ood=[100, 3000], persistence=["12%"], truth=[0.0, 0.5, -0.5]),
        dict(shapes=[(6, 2)], n_id=[200], n_ood=[300, 3000], persistence=["6%"], truth=[0.0, 0.5, -0.5]),
    ],
    # sizes only: the binomial bound (fewer regimes: the full pipeline)
    "sizes": [
        dict(
            shapes=[(12, 1), (3, 3)], n_id=[200, 10000], n_ood=[300, 3000], persistence=["12%"], truth=[0.0, 0.5, -0.5]
        ),
    ],
}
# the candidates' comparison: the moment correction where the in-domain score explains most of each series
CANDIDATES = {
    "items": [
        dict(shapes=[(12, 1)], n_id=[200, 1000], n_ood=[300, 3000], persistence=["white", "12%"], truth=[0.0, 0.5])
    ]
}
QUICK = {
    "items": [dict(shapes=[(12, 1)], n_id=[200], n_ood=[100, 3000], persistence=["12%"], truth=[0.0, 0.5])],
    "sizes": [dict(shapes=[(12, 1)], n_id=[200], n_ood=[3000], persistence=["12%"], truth=[0.0])],
}


def _f(share) -> str:
    return "" if share is None else f"{share['share']:.3f} ± {share['se']:.3f}"


def markdown(doc: dict) -> str:
    """The tables of benchmarks/README.md §16 from a run's JSON: per regime, the answer's error rates
    (beside the observed scores' answer) and the tasks' consensus."""
    out = []
    rows = sorted(
        doc["regimes"],
        key=lambda r: (r["data"], r["persistence"], r["models"], r["runs"], r["n_in_domain"], r["n_ood"], r["truth"]),
    )
    head = (
        "| data | persistence | models × runs | in-domain items | OOD items | truth | a sign stated | falsely | "
        "falsely, observed scores | near zero falsely | noise-limited | r_consensus_corrected median | "
        "median abs. error | coverage | no estimate | reliability OOD / in-domain |"
    )
    out += [head, "|" + " --- |" * (head.count("|") - 1)]
    for r in rows:
        a, o, c = r["answer"], r["observed_answer"], r["corrected"]
        out.append(
            f"| {r['data']} | {r['persistence']} | {r['models']} × {r['runs']} | {r['n_in_domain']} | {r['n_ood']} | "
            f"{r['truth']:+.1f} | {_f(a['sign'])} | {_f(a['sign_false'])} | {_f(o['sign_false'])} | "
            f"{_f(a['near_false'])} | {_f(a['noise_limited'])} | {c['median']:+.3f} | {c['median_abs_error']:.3f} | "
            f"{_f(c['coverage'])} | {_f(c['empty'])} | "
            f"{r['reliability']['x']:.2f} / {r['reliability']['in_domain']:.2f} |"
        )
    return "\n".join(out)


def _key(r: dict) -> tuple:
    return (r["data"], r["models"], r["runs"], r["n_in_domain"], r["n_ood"], r["persistence"], r["truth"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--studies", type=int, default=200, help="studies per regime with items (default 200)")
    ap.add_argument(
        "--studies-null", type=int, default=300, help="studies per regime with items at truth 0 (default 300)"
    )
    ap.add_argument("--studies-sizes", type=int, default=150, help="studies per regime with sizes only (150)")
    ap.add_argument("--seed", type=int, default=44)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--markdown", type=Path, help="print the tables of a run's JSON and stop")
    ap.add_argument(
        "--resume",
        type=Path,
        help="a JSON-lines file each regime's result is appended to as it finishes; regimes already in it are skipped",
    )
    ap.add_argument("--only", choices=tuple(GRIDS), help="one kind of data")
    ap.add_argument(
        "--candidates",
        action="store_true",
        help="the moment correction beside the cross-fitted answer, on the candidates' regimes (items)",
    )
    args = ap.parse_args()
    if args.markdown:
        print(markdown(json.loads(args.markdown.read_text())))
        return 0
    grids = QUICK if args.quick else (CANDIDATES if args.candidates else GRIDS)
    rows = []
    t0 = time.time()
    cells = [
        (kind, *cell)
        for kind, gs in grids.items()
        if not args.only or kind == args.only
        for g in gs
        for cell in product(g["shapes"], g["n_id"], g["n_ood"], g["persistence"], g["truth"])
    ]
    done = {}
    if args.resume and args.resume.exists():
        for line in args.resume.read_text().splitlines():
            r = json.loads(line)
            done[_key(r)] = r
    for kind, shape, n_id, n_ood, pers, truth in cells:
        key = (kind, shape[0], shape[1], n_id, n_ood, pers, truth)
        if key in done:
            rows.append(done[key])
            continue
        t = time.time()
        sizes = (n_id, n_ood, n_ood)
        if kind == "items":
            studies = args.studies_null if truth == 0 else args.studies
            table = _items_tables(shape, sizes, pers, truth, studies, args.seed)
            if args.candidates:
                moment = measure(_items_tables(shape, sizes, pers, truth, studies, args.seed, True), truth)
        else:
            table = _sizes_table(shape, sizes, pers, truth, args.studies_sizes, args.seed)
        res = measure(table, truth)
        if args.candidates and kind == "items":
            res["moment_answer"] = moment["answer"]
            res["moment_corrected"] = moment["corrected"]
        res.update(
            data=kind,
            models=shape[0],
            runs=shape[1],
            checkpoints=T,
            n_in_domain=n_id,
            n_ood=n_ood,
            persistence=pers,
            truth=truth,
            seconds=round(time.time() - t, 1),
        )
        rows.append(res)
        if args.resume:
            with args.resume.open("a") as fh:
                fh.write(json.dumps(res) + "\n")
        a, c = res["answer"], res["corrected"]
        cover = (c["coverage"] or {}).get("share", math.nan)
        print(
            f"{kind:5s} {shape} id {n_id:5d} ood {n_ood:5d} {pers:5s} truth {truth:+.1f}: "
            f"sign {a['sign']['share']:.3f} false {a['sign_false']['share']:.3f} "
            f"(was {res['observed_answer']['sign_false']['share']:.3f}) near {a['near']['share']:.3f} "
            f"limited {a['noise_limited']['share']:.3f} | corrected {c['median']:+.3f} "
            f"mae {c['median_abs_error']:.3f} cover {cover:.3f} empty {c['empty']['share']:.3f} "
            f"rel {res['reliability']['x']:.2f}/{res['reliability']['in_domain']:.2f} [{res['seconds']} s]",
            flush=True,
        )
    doc = {
        "command": " ".join([os.path.basename(sys.executable), *sys.argv]),
        "date": time.strftime("%Y-%m-%d"),
        "seconds": round(time.time() - t0),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "checkpoints": T,
        "persistence": {k: {"difficulty": v[0], "persistence": v[1]} for k, v in PERSISTENCE.items()},
        "regimes": rows,
    }
    if args.out:
        args.out.write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
