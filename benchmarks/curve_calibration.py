"""The answer's error rates when OOD scores follow the in-domain score along curves (issue 52 item 6).

Studies from :func:`oodcorr.analysis.simulate.runs.curve_study` (each run's ability rising along
its own learning curve, the in-domain score a smooth increasing function of it, each OOD testset
following it along its own curve -- late emergence, early plateau, S-shape, or the straight line
as a control -- plus AR(1) residual series whose innovations correlate ``truth`` between ood0 and
ood1 and 0 elsewhere; optionally item noise) are analysed with the analysis' own procedures
(``oodcorr.analysis.analyse`` with ``Options(pool_by=(), residualisers=(<one>,))``, every other
option its default; then ``oodcorr.analysis.agreement``), and each pair's verdict is counted
against the truth:

* ``false_sign``: a sign stated for a pair whose truth is 0, or the wrong sign for the planted
  pair (per pair: the mean over studies of each study's share of such pairs);
* ``false_differ``: ``models differ`` or ``sign reversal`` for a pair (every model shares each
  pair's truth, so every such statement is false; per pair as above);
* ``power``: the planted pair's sign stated (positive), per study;
* ``any_false_sign`` / ``any_false_differ``: the share of studies with at least one.

Beside each rate its Monte Carlo standard error (the sd over studies of the per-study share over
sqrt(studies)). The same seeds for every residualiser: the studies are the same.

    .venv/bin/python benchmarks/curve_calibration.py --residualisers linear spline \\
        --out benchmarks/latest/curve_calibration.json
    .venv/bin/python benchmarks/curve_calibration.py --quick --residualisers linear   # 20 studies
    .venv/bin/python benchmarks/curve_calibration.py --real /tmp/pythia.csv --studies 0 ...

``--real PYTHIA_CSV`` (benchmarks/pythia_table.py builds it) adds the real curved series beside the
simulated ones: per OOD series (a run x testset), the share of its variance a line in the in-domain
score leaves, the share of that a cubic removes, and the lag-1 autocorrelation of the cubic's
residuals, for the BigScience 1B3 checkpoint runs (../shared/data/external/bigscience_1b3_checkpoints,
in-domain lambada's acc), Pythia (in-domain lambada_openai) and the simulated regimes.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import multiprocessing
import platform
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from oodcorr.analysis import Options, agreement, analyse
from oodcorr.analysis.simulate.runs import IN_DOMAIN, Items, curve_study
from oodcorr.core.answer import MODELS_DIFFER, NEGATIVE, POSITIVE, SIGN_REVERSAL, states_a_sign

N_OOD = 4
PLANTED = 0.5
BIGSCIENCE = Path(__file__).resolve().parents[2] / "shared/data/external/bigscience_1b3_checkpoints"  # ../shared
# name: (models, runs, checkpoints, phi, family, truth of ood0 x ood1, item noise)
REGIMES = {  # the most telling first: a run cut short keeps them
    "null, curves": (12, 1, 60, 0.5, "curves", 0.0, False),
    "+0.5, curves": (12, 1, 60, 0.5, "curves", PLANTED, False),
    "+0.5, lines": (12, 1, 60, 0.5, "lines", PLANTED, False),
    "null, lines": (12, 1, 60, 0.5, "lines", 0.0, False),
    "phi 0.8, null, curves": (12, 1, 60, 0.8, "curves", 0.0, False),
    "10 checkpoints, null, curves": (12, 1, 10, 0.5, "curves", 0.0, False),
    "3 models x 3 runs x 30, null, curves": (3, 3, 30, 0.5, "curves", 0.0, False),
    "2 models x 3 runs x 30, null, curves": (2, 3, 30, 0.5, "curves", 0.0, False),
    "items (in-domain 200, OOD 300) x 25, null, curves": (12, 1, 25, 0.5, "curves", 0.0, True),
    "items (in-domain 200, OOD 300) x 25, +0.5, curves": (12, 1, 25, 0.5, "curves", PLANTED, True),
    "phi 0.8, +0.5, curves": (12, 1, 60, 0.8, "curves", PLANTED, False),
    "10 checkpoints, +0.5, curves": (12, 1, 10, 0.5, "curves", PLANTED, False),
    "3 models x 3 runs x 30, +0.5, curves": (3, 3, 30, 0.5, "curves", PLANTED, False),
}


def _study(regime: str, i: int):
    M, R, T, phi, family, truth, items = REGIMES[regime]
    seed = [52, sorted(REGIMES).index(regime), i]
    return curve_study(
        np.random.default_rng(seed),
        [truth] * M,
        R,
        T,
        n_ood=N_OOD,
        phi=phi,
        family=family,
        items=Items() if items else None,
    )


def _score(study, opts: Options) -> dict:
    """One study's counts: per pair its verdict against the truth."""
    pc = analyse(study.long, opts, examples=study.examples)
    a = agreement(pc, opts.alpha, opts.agreement_correction, opts.level, opts.near_zero)
    truth = study.truth[0]
    null_signs = null_pairs = wrong = differ = 0
    found = None
    verdicts = {}
    for x, y, v in zip(a["x"], a["y"], a["verdict"]):
        verdicts[v] = verdicts.get(v, 0) + 1
        rho = truth[int(x[3:]), int(y[3:])]
        differ += MODELS_DIFFER in v or SIGN_REVERSAL in v
        if rho == 0:
            null_pairs += 1
            null_signs += states_a_sign(v)
        else:
            want, other = (POSITIVE, NEGATIVE) if rho > 0 else (NEGATIVE, POSITIVE)
            wrong += states_a_sign(v) and other in v
            found = bool(states_a_sign(v) and want in v)
    return {
        "pairs": len(a),
        "false_sign": (null_signs + wrong) / len(a),
        "false_differ": differ / len(a),
        "power": found,
        "verdicts": verdicts,
    }


def _rate(values) -> dict:
    v = np.asarray(values, dtype=float)
    return {"rate": float(v.mean()), "mcse": float(v.std(ddof=1) / math.sqrt(len(v))) if len(v) > 1 else math.nan}


def _one(task) -> dict:
    regime, residualiser, i = task
    logging.disable(logging.WARNING)
    return _score(_study(regime, i), Options(pool_by=(), residualisers=(residualiser,)))


def run_regime(regime: str, residualiser: str, studies: int, workers: int = 1) -> dict:
    t0 = time.perf_counter()
    tasks = [(regime, residualiser, i) for i in range(studies)]
    if workers > 1:
        with multiprocessing.get_context("spawn").Pool(workers) as pool:
            got = pool.map(_one, tasks, chunksize=max(1, studies // (4 * workers)))
    else:
        got = [_one(t) for t in tasks]
    verdicts: dict = {}
    for g in got:
        for v, n in g["verdicts"].items():
            verdicts[v] = verdicts.get(v, 0) + n / g["pairs"] / studies
    out = {
        "studies": studies,
        "false_sign": _rate([g["false_sign"] for g in got]),
        "false_differ": _rate([g["false_differ"] for g in got]),
        "any_false_sign": _rate([g["false_sign"] > 0 for g in got]),
        "any_false_differ": _rate([g["false_differ"] > 0 for g in got]),
        "verdicts": dict(sorted(verdicts.items(), key=lambda kv: -kv[1])),
        "seconds": round(time.perf_counter() - t0, 1),
    }
    if REGIMES[regime][5]:
        out["power"] = _rate([g["power"] for g in got])
    return out


# ---- real curved series beside simulated ones ------------------------------------------------


def _series_stats(z: np.ndarray, y: np.ndarray) -> tuple[float, float, float]:
    """(share of y's variance a line in z leaves, share of that a cubic removes, lag-1
    autocorrelation of the cubic's residuals), z scaled to [-1, 1] first."""
    ok = np.isfinite(z) & np.isfinite(y)
    z, y = z[ok], y[ok]
    if len(z) < 8 or np.ptp(z) == 0 or np.ptp(y) == 0:
        return math.nan, math.nan, math.nan
    s = 2 * (z - z.min()) / np.ptp(z) - 1
    tss = float(((y - y.mean()) ** 2).sum())

    def rss(deg):
        X = np.vander(s, deg + 1)
        res = y - X @ np.linalg.lstsq(X, y, rcond=None)[0]
        return float(res @ res), res

    lin, _ = rss(1)
    cub, res = rss(3)
    lag1 = float(np.corrcoef(res[:-1], res[1:])[0, 1]) if np.ptp(res) > 0 else math.nan
    return lin / tss, (lin - cub) / lin if lin > 0 else math.nan, lag1


def _summary(rows: list) -> dict:
    a = np.array(rows, dtype=float)
    a = a[np.isfinite(a).all(1)]
    moving = a[a[:, 0] <= 0.5]  # series the in-domain line explains at least half of

    def q(col, arr):
        return [round(float(v), 3) for v in np.quantile(arr[:, col], [0.25, 0.5, 0.75])] if len(arr) else []

    return {
        "series": len(a),
        "left_by_line (q25, median, q75)": q(0, a),
        "cubic_removes_of_that": q(1, a),
        "lag1_cubic_residual": q(2, a),
        "moving series (line explains >= half)": {
            "series": len(moving),
            "left_by_line": q(0, moving),
            "cubic_removes_of_that": q(1, moving),
            "lag1_cubic_residual": q(2, moving),
        },
    }


def _long_stats(long: pd.DataFrame, in_domain: str) -> dict:
    rows = []
    for _, g in long.groupby("run"):
        w = g.pivot_table(index="unit", columns="testset", values="score").sort_index()
        if in_domain not in w:
            continue
        z = w[in_domain].to_numpy(float)
        rows += [_series_stats(z, w[c].to_numpy(float)) for c in w.columns if c != in_domain]
    return _summary(rows)


def real_beside_simulated(pythia_csv: Path | None, bigscience: Path, studies: int) -> dict:
    out = {}
    if not bigscience.is_dir():
        raise SystemExit(
            f"no folder {bigscience}: give --bigscience (../shared/data/external/bigscience_1b3_checkpoints)"
        )
    frames = []
    for f in sorted(bigscience.glob("*_agg.json")):
        d = json.loads(f.read_text())
        for task, metrics in d["results"].items():
            if "acc" in metrics:
                frames.append(
                    pd.DataFrame({"run": f.stem, "unit": d["checkpoints"], "testset": task, "score": metrics["acc"]})
                )
    out["bigscience 1B3 (5 runs, in-domain lambada acc)"] = _long_stats(pd.concat(frames), "lambada")
    if pythia_csv:
        p = pd.read_csv(pythia_csv).rename(columns={"step": "unit", "accuracy": "score", "model": "run"})
        out["pythia (16 models x 27, in-domain lambada_openai)"] = _long_stats(p, "lambada_openai")
    for regime in (
        "null, curves",
        "null, lines",
        "phi 0.8, null, curves",
        "items (in-domain 200, OOD 300) x 25, null, curves",
    ):
        parts = [_study(regime, i).long for i in range(studies)]
        long = pd.concat([d.assign(run=f"{i}-" + d["run"]) for i, d in enumerate(parts)])
        out[f"simulated: {regime} ({studies} studies)"] = _long_stats(long, IN_DOMAIN)
    return out


RATES = ("false_sign", "false_differ", "power")


def _table(results: dict) -> str:
    lines = [
        "| regime | residualiser | false sign | false differ / reversal | power | s/study |",
        "|---|---|---|---|---|---|",
    ]
    for regime, per in results.items():
        for res, r in per.items():
            cells = [f"{r[k]['rate']:.3f} ± {r[k]['mcse']:.3f}" if k in r else "—" for k in RATES]
            lines.append(f"| {regime} | {res} | {' | '.join(cells)} | {r['seconds'] / r['studies']:.2f} |")
    return "\n".join(lines)


def _write(out: dict, path: Path, t0: float) -> None:
    out["seconds"] = round(time.time() - t0, 1)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(out, indent=1) + "\n")
    tmp.replace(path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--residualisers", nargs="+", default=["linear"])
    ap.add_argument("--regimes", nargs="+", choices=list(REGIMES), default=list(REGIMES))
    ap.add_argument("--studies", type=int, default=400, help="studies per regime (default 400)")
    ap.add_argument("--workers", type=int, default=1, help="processes (default 1)")
    ap.add_argument("--quick", action="store_true", help="20 studies per regime, to try it")
    ap.add_argument("--real", type=Path, nargs="?", const=Path(""), help="add the real series (a Pythia csv optional)")
    ap.add_argument("--bigscience", type=Path, default=BIGSCIENCE, help="the BigScience 1B3 folder (with --real)")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/latest/curve_calibration.json"))
    args = ap.parse_args(argv)
    studies = 20 if args.quick else args.studies
    logging.disable(logging.WARNING)
    t0 = time.time()
    out = {
        "command": " ".join(["benchmarks/curve_calibration.py", *(argv if argv is not None else sys.argv[1:])]),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": platform.platform(),
        "python": sys.version.split()[0],
        "ood_testsets": N_OOD,
        "regimes": {
            k: dict(zip(("models", "runs", "checkpoints", "phi", "family", "truth", "items"), v))
            for k, v in REGIMES.items()
        },
        "results": {},
    }
    if studies:
        for regime in args.regimes:
            out["results"][regime] = {}
            for res in args.residualisers:
                r = run_regime(regime, res, studies, args.workers)
                out["results"][regime][res] = r
                print(
                    f"[{time.time() - t0:6.0f} s] {regime} / {res}: false sign {r['false_sign']['rate']:.3f}, "
                    f"false differ {r['false_differ']['rate']:.3f}, power {r.get('power', {}).get('rate', '-')}"
                    f" ({r['seconds']} s)",
                    flush=True,
                )
                _write(out, args.out, t0)  # after every regime: a run cut short keeps what it did
    if args.real is not None:
        out["real_vs_simulated"] = real_beside_simulated(args.real if str(args.real) else None, args.bigscience, 50)
        print(json.dumps(out["real_vs_simulated"], indent=1), flush=True)
    _write(out, args.out, t0)
    if out["results"]:
        print(_table(out["results"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
