"""Calibration of the analysis' inference on simulated learning-curve runs: size, coverage, power.

Each simulated run has a learning-curve-shaped in-domain score z over n checkpoints
and two OOD scores x = 0.8 z + e_x, y = -0.4 z + e_y whose noises are AR(1) across
checkpoints with coefficient phi and correlation rho (``oodcorr.analysis.simulate.runs``):
the partial correlation of x and y given z is rho. Every procedure sees the same
simulated runs.

1. Per run, over n in {9, 21, 41} and phi in {0, 0.5, 0.8, 0.95}: the share of runs
   rejecting rho = 0 at 5 % when rho = 0 (size), how often the 95 % interval holds rho
   (coverage, rho = 0.3 and 0.6), and the share rejecting when rho = 0.3 and 0.6
   (power). Procedures:

   * ``modified-t`` (shipped default): Dutilleul's modified t-test, AR(1) effective
     sample size with the design-corrected autocorrelation, interval by inverting it;
   * ``iid`` (shipped option): the same test with the units taken as independent;
   * ``block`` (shipped option, the earlier default): moving-block bootstrap interval
     and block-permutation p-value (999 resamples each);
   * ``plug-in``: as ``modified-t`` but with the raw lag-1 autocorrelation (no correction);
   * ``pyper-peterman``: Pyper & Peterman (1998) effective n from the raw
     autocorrelations up to lag n/5;
   * ``sieve``: AR sieve bootstrap (order 1 or 2 by AIC, 499 null resamples through the
     residualiser): p-value from the null distribution, Fisher-z interval with its SD;
   * ``prewhiten``: each residual series filtered by its own (corrected) AR(1) coefficient,
     then the independent-units test; note that it estimates the correlation of the
     innovations, not the r the table reports.

2. Robustness of the default: unequal autocorrelation (phi_x = 0.8, phi_y = 0), noise
   that is a random walk plus independent noise (not AR(1)), the GAM residualiser, and
   the Spearman and Kendall methods.

3. Pooling k runs of one model (n = 21, phi = 0.5) whose true correlations vary
   between runs (Fisher-z sd tau around the mean rbar): the shipped meta-analysis
   against the earlier t-test across the runs' z values.

    .venv/bin/python benchmarks/analysis_coverage.py --out benchmarks/latest/analysis_coverage.json
    .venv/bin/python benchmarks/analysis_coverage.py --reps 200 --quick    # a smoke run

Prints Markdown tables (quoted in
benchmarks/README.md#4-analysis-calibration-of-intervals-and-p-values) and writes every number to --out.
"""

import argparse
import json
import math
import platform
import sys
import time
from datetime import date

import numpy as np
from scipy import stats

from oodcorr.analysis.across.pooling import combine
from oodcorr.analysis.cell.correlate import POOLING_CAP, corr, fisher_z, residual_pair
from oodcorr.analysis.cell.inference import assess, corrected_phis, effective_n, lag1, modified_test
from oodcorr.analysis.options import Options
from oodcorr.analysis.simulate.runs import ar1_series, calibrate

SHIPPED = ("modified-t", "iid", "block")


# ---- candidates that are measured here but not shipped --------------------------------------


def plug_in(rp, pos, rng):
    """Dutilleul with the raw lag-1 autocorrelations (negative -> 0), no design correction."""
    from oodcorr.analysis.cell.inference import Dependence, ar1_corr

    deps = []
    for label in "xy":
        R, res = rp[f"R{label}"], rp[f"r{label}"]
        phi = max(lag1(res, pos), 0.0)
        deps.append(Dependence(phi, R @ ar1_corr(phi, pos) @ R.T, R @ R.T))
    r = corr(rp["rx"], rp["ry"], "pearson")
    p, lo, hi, _ = modified_test("pearson", r, effective_n(*deps), 0.95)
    return p, lo, hi


def pyper_peterman(rp, pos, rng):
    """1/N* = 1/N + (2/N) sum_{j <= N/5} rho_xx(j) rho_yy(j), raw autocorrelations with the
    N/(N-j) adjustment; N* capped at N; the test then on N* - 1 (one covariate removed)."""
    rx, ry = rp["rx"], rp["ry"]
    n = len(rx)

    def acf(v, j):
        v = v - v.mean()
        return (n / (n - j)) * (v[:-j] @ v[j:]) / (v @ v)

    s = sum(acf(rx, j) * acf(ry, j) for j in range(1, max(1, n // 5) + 1))
    n_star = min(n, 1 / (1 / n + 2 / n * s)) if (1 / n + 2 / n * s) > 0 else n
    r = corr(rx, ry, "pearson")
    p, lo, hi, _ = modified_test("pearson", r, n_star - 1, 0.95)
    return p, lo, hi


def _yule_walker(v, order):
    v = v - v.mean()
    n = len(v)
    g = np.array([v[: n - k] @ v[k:] / n for k in range(order + 1)])
    if order == 0 or g[0] <= 0:
        return np.zeros(0), g[0]
    T = np.array([[g[abs(i - j)] for j in range(order)] for i in range(order)])
    a = np.linalg.solve(T, g[1 : order + 1])
    return a, g[0] - a @ g[1 : order + 1]


def _ar_fit(v):
    """AR order 0..2 (at most n // 6) by AIC; (coefficients, innovations)."""
    n = len(v)
    best = None
    for order in range(0, min(2, n // 6) + 1):
        a, s2 = _yule_walker(v, order)
        aic = n * math.log(max(s2, 1e-300)) + 2 * order
        if best is None or aic < best[0]:
            best = (aic, a)
    a = best[1]
    vc = v - v.mean()
    innov = np.array([vc[t] - sum(a[k] * vc[t - k - 1] for k in range(len(a))) for t in range(len(a), n)])
    return a, innov - innov.mean()


def _simulate_ar(a, innov, n, B, rng, burn=50):
    e = rng.choice(innov, size=(B, n + burn)) if len(innov) else np.zeros((B, n + burn))
    x = np.zeros((B, n + burn))
    for t in range(n + burn):
        x[:, t] = e[:, t] + sum(a[k] * x[:, t - k - 1] for k in range(len(a)) if t - k - 1 >= 0)
    return x[:, burn:]


def sieve(rp, pos, rng, B=499):
    rx, ry = rp["rx"], rp["ry"]
    n = len(rx)
    xs = _simulate_ar(*_ar_fit(rx), n, B, rng) @ rp["Rx"].T
    ys = _simulate_ar(*_ar_fit(ry), n, B, rng) @ rp["Ry"].T
    xs -= xs.mean(1, keepdims=True)
    ys -= ys.mean(1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        rs = (xs * ys).sum(1) / np.sqrt((xs * xs).sum(1) * (ys * ys).sum(1))
    rs = rs[np.isfinite(rs)]
    r = corr(rx, ry, "pearson")
    p = (1 + np.sum(np.abs(rs) >= abs(r) - 1e-12)) / (1 + len(rs))
    se = float(fisher_z(rs, POOLING_CAP).std(ddof=1))
    z = float(fisher_z(r, POOLING_CAP))
    return float(p), math.tanh(z - 1.96 * se), math.tanh(z + 1.96 * se)


def prewhiten(rp, pos, rng):
    us = []
    for label in "xy":
        res = rp[f"r{label}"]
        _, phi = corrected_phis(res, rp[f"R{label}"], pos)
        us.append(res[1:] - phi * res[:-1])
    r = corr(us[0], us[1], "pearson")
    p, lo, hi, _ = modified_test("pearson", r, len(us[0]) - 1, 0.95)
    return p, lo, hi


EXTRA = {"plug-in": plug_in, "pyper-peterman": pyper_peterman, "sieve": sieve, "prewhiten": prewhiten}


# ---- sections -----------------------------------------------------------------------------------


def _opts(args) -> Options:
    """The settings of every calibration here: the seed asked for, 999 resamples and permutations."""
    return Options(seed=args.seed, n_boot=999, n_perm=999)


def per_run(args) -> list[dict]:
    out = []
    extra = {k: f for k, f in EXTRA.items() if k in args.candidates}
    shipped = [k for k in SHIPPED if k in args.candidates]
    for n in args.n:
        for phi in args.phi:
            t0 = time.time()
            cells = {
                rho: calibrate(
                    n, phi, rho, args.reps, shipped, extra=extra, residualiser=args.residualiser, opts=_opts(args)
                )
                for rho in (0.0, 0.3, 0.6)
            }
            for name in shipped + list(extra):
                out.append(
                    {
                        "n": n,
                        "phi": phi,
                        "procedure": name,
                        "size": cells[0.0][name]["reject"],
                        "coverage_0.3": cells[0.3][name]["coverage"],
                        "coverage_0.6": cells[0.6][name]["coverage"],
                        "power_0.3": cells[0.3][name]["reject"],
                        "power_0.6": cells[0.6][name]["reject"],
                        "median_width_0.3": cells[0.3][name]["width"],
                        "median_n_eff": cells[0.0][name]["n_eff"],
                        "low_info": cells[0.0][name]["low_info"],
                        "reps": args.reps,
                    }
                )
            print(f"  per-run n={n} phi={phi}: {time.time() - t0:.0f} s", file=sys.stderr, flush=True)
    return out


def robustness(args) -> list[dict]:
    out = []
    reps = args.reps
    for n in (21, 41):
        c = calibrate(n, (0.8, 0.0), 0.0, reps, opts=_opts(args))["modified-t"]
        out.append({"case": "phi_x 0.8, phi_y 0", "n": n, "size": c["reject"], "reps": reps})
    for n in args.n:
        c = calibrate(n, 0.0, 0.0, reps, series="drift", opts=_opts(args))["modified-t"]
        out.append({"case": "random walk + noise", "n": n, "size": c["reject"], "reps": reps})
    gam_reps = max(50, reps // 4)
    for phi in (0.0, 0.5, 0.8):
        c0 = calibrate(21, phi, 0.0, gam_reps, residualiser="gam", opts=_opts(args))["modified-t"]
        c6 = calibrate(21, phi, 0.6, gam_reps, residualiser="gam", opts=_opts(args))["modified-t"]
        out.append(
            {
                "case": "gam residualiser",
                "n": 21,
                "phi": phi,
                "size": c0["reject"],
                "coverage_0.6": c6["coverage"],
                "power_0.6": c6["reject"],
                "reps": gam_reps,
            }
        )
        print(f"  robustness gam phi={phi} done", file=sys.stderr, flush=True)
    for method in ("spearman", "kendall"):
        for phi in (0.0, 0.5, 0.8):
            c0 = calibrate(21, phi, 0.0, reps, method=method, opts=_opts(args))["modified-t"]
            c6 = calibrate(21, phi, 0.6, reps, method=method, opts=_opts(args))["modified-t"]
            out.append(
                {"case": method, "n": 21, "phi": phi, "size": c0["reject"], "power_0.6": c6["reject"], "reps": reps}
            )
    return out


def pooling(args) -> list[dict]:
    out = []
    n, phi = 21, 0.5
    pos = np.arange(n)
    for k in (2, 3, 5):
        for tau in (0.0, 0.2, 0.4):
            for rbar in (0.0, 0.3):
                rng = np.random.default_rng([args.seed, k, int(tau * 10), int(rbar * 10)])
                mu = math.atanh(rbar)
                acc = {"shipped": [0, 0], "t-test across runs": [0, 0]}
                for _ in range(args.reps):
                    zs, vs = [], []
                    for _ in range(k):
                        x, y, z = ar1_series(rng, n, phi, math.tanh(mu + tau * rng.normal()))
                        rp = residual_pair(x, y, z)
                        r = corr(rp["rx"], rp["ry"], "pearson")
                        a = assess(rp, r, "pearson", pos, Options())
                        zs.append(math.atanh(r))
                        vs.append(a["se_z"] ** 2)
                    c = combine(zs, vs, 0.95)
                    acc["shipped"][0] += c["p"] < 0.05
                    acc["shipped"][1] += c["lo"] <= mu <= c["hi"]
                    zs = np.array(zs)
                    half = stats.t.ppf(0.975, k - 1) * zs.std(ddof=1) / math.sqrt(k)
                    acc["t-test across runs"][0] += stats.ttest_1samp(zs, 0).pvalue < 0.05
                    acc["t-test across runs"][1] += zs.mean() - half <= mu <= zs.mean() + half
                for name, (rej, cov) in acc.items():
                    out.append(
                        {
                            "k": k,
                            "tau": tau,
                            "rbar": rbar,
                            "procedure": name,
                            "reject": rej / args.reps,
                            "coverage": cov / args.reps,
                            "reps": args.reps,
                        }
                    )
            print(f"  pooling k={k} tau={tau} done", file=sys.stderr, flush=True)
    return out


# ---- output ---------------------------------------------------------------------------------------


def _f(v):
    return "–" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.3f}"


def markdown(res: dict) -> str:
    lines = []
    rows = [r for r in res["per_run"] if r["procedure"] == "modified-t"]
    if rows:
        lines += [
            "Default (`modified-t`), 95 % intervals, tests at 5 %:",
            "",
            "| n | φ | size | coverage ρ=0.3 | coverage ρ=0.6 | power ρ=0.3 | power ρ=0.6 "
            "| median n_eff (ρ=0) | n_eff < 5 |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        for r in rows:
            lines.append(
                f"| {r['n']} | {r['phi']} | {_f(r['size'])} | {_f(r['coverage_0.3'])} | "
                f"{_f(r['coverage_0.6'])} | {_f(r['power_0.3'])} | {_f(r['power_0.6'])} | "
                f"{r['median_n_eff']:.1f} | {_f(r['low_info'])} |"
            )
        lines.append("")
    procs = list(dict.fromkeys(r["procedure"] for r in res["per_run"]))
    if procs:
        lines += [
            "All procedures: size / coverage at ρ = 0.6 / power at ρ = 0.6:",
            "",
            "| n | φ | " + " | ".join(procs) + " |",
            "| --- | --- | " + " | ".join("---" for _ in procs) + " |",
        ]
        cells = {}
        for r in res["per_run"]:
            cells.setdefault((r["n"], r["phi"]), {})[r["procedure"]] = r
        for (n, phi), d in cells.items():
            lines.append(
                f"| {n} | {phi} | "
                + " | ".join(
                    f"{_f(d[p]['size'])} / {_f(d[p]['coverage_0.6'])} / {_f(d[p]['power_0.6'])}" for p in procs
                )
                + " |"
            )
        lines.append("")
    if res.get("robustness"):
        lines += [
            "Robustness of the default:",
            "",
            "| case | n | φ | size | coverage ρ=0.6 | power ρ=0.6 | runs |",
            "| --- | --- | --- | --- | --- | --- | --- |",
        ]
        for r in res["robustness"]:
            lines.append(
                f"| {r['case']} | {r['n']} | {r.get('phi', '–')} | {_f(r['size'])} | "
                f"{_f(r.get('coverage_0.6'))} | {_f(r.get('power_0.6'))} | {r['reps']} |"
            )
        lines.append("")
    if res.get("pooling"):
        lines += [
            "Pooling k runs (n = 21, φ = 0.5; between-run sd τ of Fisher z): rejection rate / coverage of the "
            "mean correlation:",
            "",
            "| k | τ | shipped, ρ̄=0 | shipped, ρ̄=0.3 | t-test across runs, ρ̄=0 | t-test across runs, ρ̄=0.3 |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        cells = {}
        for r in res["pooling"]:
            cells.setdefault((r["k"], r["tau"]), {})[(r["procedure"], r["rbar"])] = r
        for (k, tau), d in cells.items():
            lines.append(
                f"| {k} | {tau} | "
                + " | ".join(
                    f"{_f(d[(p, rb)]['reject'])} / {_f(d[(p, rb)]['coverage'])}"
                    for p in ("shipped", "t-test across runs")
                    for rb in (0.0, 0.3)
                )
                + " |"
            )
        lines.append("")
    lines.append(
        f"{res['reps']} simulated runs per cell (GAM rows: fewer, see the runs column), seed {res['seed']}, "
        f"{res['seconds']:.0f} s, {res['date']}."
    )
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=2000)
    ap.add_argument("--n", type=int, nargs="+", default=[9, 21, 41])
    ap.add_argument("--phi", type=float, nargs="+", default=[0.0, 0.5, 0.8, 0.95])
    ap.add_argument("--candidates", nargs="+", default=list(SHIPPED) + list(EXTRA), choices=list(SHIPPED) + list(EXTRA))
    ap.add_argument(
        "--sections",
        nargs="+",
        default=["per-run", "robustness", "pooling"],
        choices=["per-run", "robustness", "pooling"],
    )
    ap.add_argument("--seed", type=int, default=2026)
    ap.add_argument("--residualiser", default="linear", help="of the per-run section (linear, spline, ...)")
    ap.add_argument("--out", help="write every number as JSON here")
    args = ap.parse_args()
    t0 = time.time()
    res = {
        "reps": args.reps,
        "seed": args.seed,
        "date": date.today().isoformat(),
        "python": platform.python_version(),
        "command": " ".join(sys.argv),
        "residualiser": args.residualiser,
        "per_run": [],
        "robustness": [],
        "pooling": [],
    }
    if "per-run" in args.sections:
        res["per_run"] = per_run(args)
    if "robustness" in args.sections:
        res["robustness"] = robustness(args)
    if "pooling" in args.sections:
        res["pooling"] = pooling(args)
    res["seconds"] = time.time() - t0
    print(markdown(res))
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(res, fh, indent=1)


if __name__ == "__main__":
    main()
