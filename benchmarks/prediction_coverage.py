"""What agreement.csv says of a further model: the prediction interval's coverage, generalises' error rates.

agreement.csv says where a further model of the table's kind is expected (the prediction
interval, ``pi_low_consensus``..``pi_high_consensus``) and whether models of the other sign are
shown to be rare (``generalises``, from the tolerance bounds ``tol_low_consensus``,
``tol_high_consensus``). This benchmark measures both in every regime of the calibration grid:
runs per model 1, 2, 3; models 3, 6, 10, 16; AR(1) phi 0.5, 0.8, 0.95; 27 checkpoints for one run
per model, 21 otherwise; the models' true correlations drawn per study from N(mu, tau^2) on the
Fisher z scale, mu 0 or -0.55 (r -0.5), tau 0, 0.15, 0.28 (the boundary: a further model shares
the sign with probability 0.975) or 0.35. In every simulated study one further model is drawn
from the same N(mu, tau^2), and the share of studies whose interval holds its z is the coverage.
Beside it, the share of each verdict; ``generalises`` is counted false wherever a further model's
true sign is shared with probability below 0.975 (Phi(|mu| / tau) < 0.975, and every mu = 0
regime). Beside the power at "every model -0.5", the best possible: the most powerful test of the
boundary against it, told mu and the noise (:func:`oracle_power`). Plus the Pythia shape (16
models x 1 run x 27 checkpoints, phi 0.8) with the fixed correlations of verdict_calibration.py's
scenarios, and the two shapes issue 30 measured on.

Studies are simulated and analysed by the design command's two steps (oodcorr.analysis.design:
the per-run procedure on stacks of runs, then oodcorr.analysis.consensus.across_models and the
verdict), which give the full pipeline's verdict on the same draws (checked here on a subset, and
in benchmarks/design_agreement.py). Each regime's studies are the same draws for every candidate
and every (mu, tau) of its shape (common random numbers), so candidates differ by procedure
alone. The candidates (:data:`CANDIDATES`): the shipped rules, the tolerance bound's side alone,
generalises read off the shipped interval, issue 30's first interval, and the interval before
issue 30 (Paule-Mandel tau^2, mu +- t_{M-2} sqrt(tau^2 + se^2)).

    .venv/bin/python benchmarks/prediction_coverage.py --out benchmarks/latest/prediction_coverage.json \\
        [--studies 1000] [--studies-runs 1000] [--check 150]
    .venv/bin/python benchmarks/prediction_coverage.py --out /tmp/issue_shapes.json --runs --check 0
        # only the issue's two shapes and the Pythia shape

Monte Carlo standard error sqrt(p (1 - p) / studies) beside every share. Where tau = 0 (every model's
truth is mu) the row also holds ``within_variance_ratio``: the variance of the models' z_m around mu over
the mean of their V_m, 1 when the within-model variance the model is fed is right.
Tables: benchmarks/README.md#14-the-prediction-interval-across-models-coverage (``--markdown``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
from scipy import stats

from oodcorr.analysis.design import Assumptions, Grid, Settings, simulate_runs, studies_of, verdict_shares, verdicts_of
from oodcorr.analysis.predictive import predictive_batch, tolerance_batch
from oodcorr.analysis.simulate import scenario, verdict_rates

SETTINGS = Settings()
MODELS = (3, 6, 10, 16)
RUNS = (1, 2, 3)
PHIS = (0.5, 0.8, 0.95)
# (mu, tau); (-0.55, 0.28) is the boundary: a further model shares the sign with probability 0.975
SPREADS = ((0.0, 0.0), (0.0, 0.15), (0.0, 0.35), (-0.55, 0.0), (-0.55, 0.15), (-0.55, 0.28), (-0.55, 0.35))
BOUNDARY = (-0.55, 0.28)
SHIP = "shipped"
# the candidates: name -> (the prediction interval's within-model scales, the rule of generalises)
CANDIDATES = {
    SHIP: "prediction interval with lambda in [0.5, 1]; generalises: tolerance bound, both sides (p doubled)",
    "tolerance, one side": "the same interval; generalises: tolerance bound, the data's side (p not doubled)",
    "interval excludes 0": "the same prediction interval; generalises: it excludes 0",
    "first interval (lambda 1)": "issue 30's first interval (V_m as given); generalises: it excludes 0",
}
OLD = "as it was (t_{M-2}, Paule-Mandel)"


def old_interval(res: dict, level: float) -> dict:
    """The prediction interval and p_generalises before issue 30: mu +- t_{M-2} sqrt(tau2 + se^2)."""
    m, se, t2, k = res["z"], res["se"], res["tau2"], res["n_models"]
    with np.errstate(invalid="ignore", divide="ignore"):
        spread = np.sqrt(t2 + se * se)
        dfp = np.maximum(k - 2, 1)
        tp = stats.t.ppf(0.5 + level / 2, dfp)
        p = np.where(spread > 0, 2 * stats.t.sf(np.abs(m) / spread, dfp), 0.0)
    three = k >= 3
    return {
        "pi_lo": np.where(three, m - tp * spread, np.nan),
        "pi_hi": np.where(three, m + tp * spread, np.nan),
        "p_generalises": np.where(three, p, np.nan),
    }


def share(x) -> dict:
    x = np.asarray(x, dtype=float)
    p = float(np.mean(x))
    return {"share": p, "se": math.sqrt(p * (1 - p) / len(x))}


def sign_shared(mu: float, tau: float) -> float:
    """P(a further model's true z has the sign of mu): 1 for a shared nonzero value, 0 at mu = 0."""
    if mu == 0:
        return 0.0 if tau == 0 else 0.5
    return 1.0 if tau == 0 else float(stats.norm.cdf(abs(mu) / tau))


def evaluate(grid: Grid, runs: dict, a: Assumptions, new_z: np.ndarray, shared: float) -> dict:
    """Coverage and verdicts of every candidate on one regime's simulated studies."""
    res = studies_of(runs, SETTINGS)
    present = np.isfinite(res["zm"])
    out = {}
    zm, Vm = np.where(present, res["zm"], 0.0), np.where(present, res["Vm"], 1.0)
    shipped_pi = None
    for name in (*CANDIDATES, OLD):
        r = dict(res)
        if name == OLD:
            r.update(old_interval(res, SETTINGS.level))
        elif name == "tolerance, one side":
            tol = tolerance_batch(zm, Vm, present, SETTINGS.level)
            r["p_generalises"] = np.fmin(tol["p_low_side"], tol["p_high_side"])
        elif name == "interval excludes 0":
            shipped_pi = predictive_batch(zm, Vm, present, SETTINGS.level)
            r["p_generalises"] = np.where(present.sum(-1) >= 3, shipped_pi["p_predictive"], np.nan)
        elif name == "first interval (lambda 1)":
            first = predictive_batch(zm, Vm, present, SETTINGS.level, within_scales=(1.0,))
            r.update(pi_lo=first["pi_lo"], pi_hi=first["pi_hi"], p_generalises=first["p_predictive"])
        cover = (r["pi_lo"] <= new_z) & (new_z <= r["pi_hi"])
        words = verdicts_of(r, r, grid, a, SETTINGS, np.random.default_rng(0))
        gen = np.array([w.startswith("generalises") for w in words])
        right_side = np.array([w == "generalises (negative)" for w in words])  # every mu here is <= 0
        block = {
            "coverage": share(cover),
            "generalises": share(gen),
            "generalises_false": share(gen) if shared < 0.975 else None,
            "generalises_wrong_sign": share(gen & ~right_side),
            "width_median": float(np.nanmedian(r["pi_hi"] - r["pi_lo"])),
        }
        if name in (OLD, SHIP):
            shares = verdict_shares(words)
            block["verdicts"] = {k: {"share": v, "se": math.sqrt(v * (1 - v) / len(words))} for k, v in shares.items()}
        out[name] = block
    return out


def _coverage_and_false(rows: list[dict], name: str) -> tuple[list[float], list[float], list[float]]:
    """Candidate ``name``'s coverage in every regime, its false generalises where one is counted, and
    its generalises at the boundary (a further model of the other sign with probability 0.025)."""
    blocks = [r["candidates"][name] for r in rows]
    boundary = [r["candidates"][name]["generalises"]["share"] for r in rows if (r["mu"], r["tau"]) == BOUNDARY]
    return (
        [b["coverage"]["share"] for b in blocks],
        [b["generalises_false"]["share"] for b in blocks if b["generalises_false"]],
        boundary,
    )


def oracle_power(runs_same: dict, runs_boundary: dict, mu: float) -> float:
    """An upper bound on the power of any rule for generalises that keeps its false rate at 0.05 at
    the boundary: the most powerful test of the boundary (true spread 0.28 around ``mu``) against
    every model at ``mu``, told ``mu`` and the models' noise, rejects when ``sum (z_m - mu)^2`` is
    below its 5 % quantile at the boundary (Neyman-Pearson: with the same noise in every model the
    likelihood ratio falls with that sum). Both quantiles are taken from the simulated studies."""
    t_same = np.nansum((studies_of(runs_same, SETTINGS)["zm"] - mu) ** 2, axis=-1)
    t_bound = np.nansum((studies_of(runs_boundary, SETTINGS)["zm"] - mu) ** 2, axis=-1)
    return float(np.mean(t_same < np.quantile(t_bound, 0.05)))


def _cell(b: dict) -> str:
    return f"{b['share']:.3f} ± {b['se']:.3f}"


def _by_shape(rows: list[dict]) -> dict:
    """{(runs, models, checkpoints, phi): {(mu, tau): row}}."""
    out: dict = {}
    for r in rows:
        out.setdefault((r["runs"], r["models"], r["checkpoints"], r["phi"]), {})[(r["mu"], r["tau"])] = r
    return dict(sorted(out.items()))


def markdown(out: dict) -> str:
    """The tables of benchmarks/README.md#14-the-prediction-interval-across-models-coverage from a JSON
    this script wrote."""
    rows = out["rows"]
    shapes = _by_shape(rows)
    spreads = sorted({(r["mu"], r["tau"]) for r in rows}, key=lambda t: (-t[0], t[1]))
    lines = [
        "| candidate | lowest coverage | regimes below 0.93 | largest false generalises | largest at the boundary "
        "| power, 6 × 3 × 21 φ 0.5 at −0.5 | power, Pythia shape at −0.5 |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name in (*CANDIDATES, OLD):
        cov, fg, bd = _coverage_and_false(rows, name)
        p6 = shapes.get((3, 6, 21, 0.5), {}).get((-0.55, 0.0))
        py = (
            out["pythia_shape"]["same -0.5"]["candidates"][name]["generalises"]["share"]
            if out["pythia_shape"]
            else math.nan
        )
        p6v = p6["candidates"][name]["generalises"]["share"] if p6 else math.nan
        lines.append(
            f"| {name} | {min(cov):.3f} | {sum(c < 0.93 for c in cov)} of {len(cov)} | {max(fg):.3f} | "
            f"{max(bd) if bd else math.nan:.3f} | {p6v:.3f} | {py:.3f} |"
        )
    lines += [
        "",
        "| runs × models (checkpoints) | φ | "
        + " | ".join(f"μ {mu:g}, τ {tau:g}" for mu, tau in spreads)
        + " | lowest, first interval | lowest, as it was |",
        "| --- | ---: | " + " | ".join("---:" for _ in spreads) + " | ---: | ---: |",
    ]
    for (K, M, N, phi), rs in shapes.items():
        cells = []
        for sp in spreads:
            b = rs[sp]["candidates"][SHIP]["coverage"]
            cells.append(("**" + _cell(b) + "**") if b["share"] < 0.93 else _cell(b))
        first = min(rs[sp]["candidates"]["first interval (lambda 1)"]["coverage"]["share"] for sp in spreads)
        old = min(rs[sp]["candidates"][OLD]["coverage"]["share"] for sp in spreads)
        lines.append(f"| {K} × {M} ({N}) | {phi:g} | " + " | ".join(cells) + f" | {first:.3f} | {old:.3f} |")
    lines += [
        "",
        "| runs × models (checkpoints) | φ | every model −0.5: generalises (interval excludes 0) | best possible "
        "| μ −0.55, τ 0.15 | boundary: μ −0.55, τ 0.28 | false: μ −0.55, τ 0.35 (interval excludes 0) "
        "| false: largest at μ 0 |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for (K, M, N, phi), rs in shapes.items():

        def g(sp, name=SHIP, rs=rs):
            return rs[sp]["candidates"][name]["generalises"]

        zero = [sp for sp in spreads if sp[0] == 0]
        worst = max(zero, key=lambda sp: g(sp)["share"])
        ex = "interval excludes 0"
        oracle = rs[(-0.55, 0.0)].get("best_possible_power", math.nan)
        lines.append(
            f"| {K} × {M} ({N}) | {phi:g} | {_cell(g((-0.55, 0.0)))} ({g((-0.55, 0.0), ex)['share']:.3f}) | "
            f"{oracle:.3f} | {_cell(g((-0.55, 0.15)))} | {_cell(g(BOUNDARY))} | "
            f"{_cell(g((-0.55, 0.35)))} ({g((-0.55, 0.35), ex)['share']:.3f}) | {_cell(g(worst))} |"
        )
    lines += [
        "",
        "| Pythia shape (16 × 1 × 27, φ 0.8), fixed correlations | coverage | generalises "
        "| interval excludes 0 | as it was: coverage | as it was: generalises |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, b in out["pythia_shape"].items():
        c, o = b["candidates"][SHIP], b["candidates"][OLD]
        lines.append(
            f"| {name} | {_cell(c['coverage'])} | {_cell(c['generalises'])} | "
            f"{_cell(b['candidates']['interval excludes 0']['generalises'])} | "
            f"{_cell(o['coverage'])} | {_cell(o['generalises'])} |"
        )
    if out.get("issue_shapes"):
        lines += [
            "",
            "| issue 30's shapes (μ −0.35, τ 0.28: one model in nine positive) | coverage | false generalises "
            "| interval excludes 0 | as it was: coverage | as it was: false generalises |",
            "| --- | ---: | ---: | ---: | ---: | ---: |",
        ]
        for r in out["issue_shapes"]:
            c, o = r["candidates"][SHIP], r["candidates"][OLD]
            lines.append(
                f"| {r['models']} × {r['runs']} × {r['checkpoints']}, φ {r['phi']:g} | {_cell(c['coverage'])} | "
                f"{_cell(c['generalises'])} | {_cell(r['candidates']['interval excludes 0']['generalises'])} | "
                f"{_cell(o['coverage'])} | {_cell(o['generalises'])} |"
            )
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--markdown", action="store_true", help="print the tables of the JSON at --out and stop")
    ap.add_argument("--studies", type=int, default=1000, help="studies per regime with one run per model")
    ap.add_argument("--studies-runs", type=int, default=1000, help="studies per regime with 2 or 3 runs per model")
    ap.add_argument("--check", type=int, default=150, help="studies per scenario of the pipeline check (0: none)")
    ap.add_argument("--models", type=int, nargs="*", default=list(MODELS))
    ap.add_argument("--runs", type=int, nargs="*", default=list(RUNS))
    ap.add_argument("--phis", type=float, nargs="*", default=list(PHIS))
    args = ap.parse_args(argv)
    if args.markdown:
        print(markdown(json.loads(args.out.read_text())), end="")
        return 0
    t0, c0 = time.time(), time.process_time()
    load = [os.getloadavg()]
    rows = []
    for K in args.runs:
        N = 27 if K == 1 else 21
        S = args.studies if K == 1 else args.studies_runs
        for M in args.models:
            for phi in args.phis:
                grid = Grid(M, K, N)
                kept = {}
                for mu, tau in SPREADS:
                    a = Assumptions(phi=phi, model_sd=tau)
                    key = [30, M, K, N, round(1000 * phi)]
                    runs = simulate_runs(grid, a, math.tanh(mu), S, np.random.default_rng(key))
                    if (mu, tau) in ((-0.55, 0.0), BOUNDARY):
                        kept[(mu, tau)] = runs
                    new_z = mu + tau * np.random.default_rng([*key, 1]).normal(size=S)
                    shared = sign_shared(mu, tau)
                    row = {"models": M, "runs": K, "checkpoints": N, "phi": phi, "mu": mu, "tau": tau}
                    row.update(studies=S, sign_shared=shared, candidates=evaluate(grid, runs, a, new_z, shared))
                    if tau == 0:  # every model's truth is mu: is the within-model variance fed to the model right?
                        res = studies_of(runs, SETTINGS)
                        row["within_variance_ratio"] = float(np.nanvar(res["zm"] - mu) / np.nanmean(res["Vm"]))
                    rows.append(row)
                    if (mu, tau) == BOUNDARY:
                        same = next(
                            r
                            for r in rows
                            if r is not row
                            and (r["models"], r["runs"], r["phi"], r["mu"], r["tau"]) == (M, K, phi, -0.55, 0.0)
                        )
                        same["best_possible_power"] = oracle_power(kept[(-0.55, 0.0)], runs, -0.55)
                    c = row["candidates"][SHIP]
                    print(
                        f"[{time.time() - t0:6.0f} s] {M} x {K} x {N} phi {phi} mu {mu} tau {tau}: coverage "
                        f"{c['coverage']['share']:.3f} (was {row['candidates'][OLD]['coverage']['share']:.3f}), "
                        f"generalises {c['generalises']['share']:.3f} "
                        f"(was {row['candidates'][OLD]['generalises']['share']:.3f})",
                        flush=True,
                    )
        load.append(os.getloadavg())

    # the shapes issue 30 measured on (about one model in nine positive: mu -0.35, tau 0.28)
    issue = []
    for M, K, N, phi in ((10, 1, 25, 0.8), (8, 2, 21, 0.6)):
        grid, a, mu, tau, S = Grid(M, K, N), Assumptions(phi=phi, model_sd=0.28), -0.35, 0.28, args.studies
        key = [30, M, K, N, round(1000 * phi), 9]
        runs = simulate_runs(grid, a, math.tanh(mu), S, np.random.default_rng(key))
        new_z = mu + tau * np.random.default_rng([*key, 1]).normal(size=S)
        shared = sign_shared(mu, tau)
        row = {"models": M, "runs": K, "checkpoints": N, "phi": phi, "mu": mu, "tau": tau, "studies": S}
        row.update(sign_shared=shared, candidates=evaluate(grid, runs, a, new_z, shared))
        issue.append(row)
        c = row["candidates"]
        print(
            f"[{time.time() - t0:6.0f} s] issue shape {M} x {K} x {N} phi {phi}: coverage "
            f"{c[SHIP]['coverage']['share']:.3f} (was {c[OLD]['coverage']['share']:.3f}), "
            f"false generalises {c[SHIP]['generalises']['share']:.3f} "
            f"(was {c[OLD]['generalises']['share']:.3f})",
            flush=True,
        )

    # the Pythia shape with verdict_calibration.py's fixed correlations per model
    pythia = {}
    grid, a = Grid(16, 1, 27), Assumptions(phi=0.8)
    for name, rhos, new in (
        ("same -0.5", scenario("same", 16, -0.5), lambda rng, n: np.full(n, math.atanh(-0.5))),
        ("spread mostly below 0", scenario("spread-off-zero", 16, 0.5), lambda rng, n: rng.uniform(-0.8, 0.2, n)),
        ("null", scenario("null", 16), lambda rng, n: np.zeros(n)),
    ):
        S = args.studies
        runs = simulate_runs(grid, a, rhos, S, np.random.default_rng([30, 16, 1, 27, 800, 7]))
        new_z = new(np.random.default_rng([30, 8]), S)
        shared = {"same -0.5": 1.0, "spread mostly below 0": 0.8, "null": 0.0}[name]  # uniform(-0.8, 0.2) < 0
        pythia[name] = {"studies": S, "sign_shared": shared, "candidates": evaluate(grid, runs, a, new_z, shared)}
        c = pythia[name]["candidates"]
        print(
            f"[{time.time() - t0:6.0f} s] Pythia shape {name}: generalises "
            f"{c[SHIP]['generalises']['share']:.3f} (was {c[OLD]['generalises']['share']:.3f})",
            flush=True,
        )

    # the full pipeline on the same draws as the design's two steps, for a subset
    check = []
    if args.check:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from design_agreement import same_studies

        for label, grid, a, rhos in (
            (
                "Pythia shape, spread mostly below 0",
                Grid(16, 1, 27),
                Assumptions(phi=0.8),
                scenario("spread-off-zero", 16),
            ),
            ("6 x 3 x 21 phi 0.5, every model -0.5", Grid(6, 3, 21), Assumptions(phi=0.5), scenario("same", 6, -0.5)),
        ):
            full = verdict_rates(rhos, grid.runs, grid.checkpoints, a.phi, args.check, seed=30)["verdicts"]
            two = same_studies(grid, a, rhos, args.check, 30)
            diff = max(abs(full.get(k, 0.0) - two.get(k, 0.0)) for k in set(full) | set(two))
            check.append(
                {"case": label, "studies": args.check, "pipeline": full, "design": two, "largest_difference": diff}
            )
            print(f"[{time.time() - t0:6.0f} s] pipeline check {label}: largest difference {diff:.4f}", flush=True)

    out = {
        "machine": platform.platform(),
        "python": sys.version.split()[0],
        "settings": {"alpha": SETTINGS.alpha, "level": SETTINGS.level, "correction": SETTINGS.correction},
        "load_average": load,
        "rows": rows,
        "pythia_shape": pythia,
        "issue_shapes": issue,
        "pipeline_check": check,
        "seconds": round(time.time() - t0, 1),
        "cpu_seconds": round(time.process_time() - c0, 1),
    }
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    for name in (*CANDIDATES, OLD) if rows else ():
        cov, fg, bd = _coverage_and_false(rows, name)
        print(
            f"{name}: coverage min {min(cov):.3f}, false generalises max {max(fg) if fg else math.nan:.3f}, "
            f"at the boundary max {max(bd) if bd else math.nan:.3f}"
        )
    print(f"{out['seconds']} s; {SHIP} is agreement.csv's")
    return 0


if __name__ == "__main__":
    sys.exit(main())
