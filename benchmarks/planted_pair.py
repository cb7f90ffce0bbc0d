"""The embedded default's testsets at a far larger size: is what the run's answer says true of the tasks?

    .venv/bin/python benchmarks/planted_pair.py results/planted-three-models \
        --configfile benchmarks/planted_three_models.yaml --n 10000 \
        --large benchmarks/latest/planted_pair_scores.csv --out benchmarks/latest/planted_pair_3m.json
    .venv/bin/python benchmarks/planted_pair.py results/default --n 10000 \
        --large benchmarks/latest/planted_pair_scores.csv --out benchmarks/latest/planted_pair.json

Reads a finished experiment (`make run`'s, config/config.yaml, or ``--configfile``'s): every run's
checkpoints are scored on every testset of the config drawn again from the same generator, the same
shift and filter, with other seeds (seed + 100) and ``--n`` examples (the planted halves: ``--n`` of
``2 --n``), through the workflow's own preparation, tokenisation and evaluation
(oodcorr.jobs.prepare_dataset.prepare, oodcorr.jobs.tokenize_testset, oodcorr.jobs.evaluate.evaluate_run) in a
temporary folder. At 10,000 examples an accuracy's item noise is at most 0.005, so these series are
the tasks' to within that. It prints and writes, per model:

* every OOD pair's partial correlation (linear residualiser, Pearson; in-domain accuracy at ``--n``
  examples regressed out of both), beside the run's own (``analysis/partial_correlations.csv``) and the
  answer's verdict for the pair (``analysis/agreement.csv``);
* each OOD set's residual sd after in-domain, in the run (600 examples) and at ``--n``; and the share of
  the run's residual variance that is item noise: the variance an item bootstrap of the run's own
  predictions adds to the residual series (the same items resampled at every checkpoint), over the
  residual variance observed.

``--large FILE`` keeps those accuracies (a CSV): given again, they are read instead of scored (the
checkpoints are the same as long as the finetunes are). One core; 503 s at 10,000 examples on the
2-core VM shared with other sessions (2 runs x 9 checkpoints x 8 testsets).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd

from oodcorr.core.atomic_write import write_json_atomic, write_jsonl_atomic
from oodcorr.jobs.evaluate import EvalParams, checkpoints_to_score, evaluate_run
from oodcorr.jobs.prepare_dataset import prepare
from oodcorr.jobs.tokenize_testset import tokenize_testset
from oodcorr.planning.plan import load
from oodcorr.planning.schema import read_config

REPO = Path(__file__).resolve().parents[1]


def residuals(y: np.ndarray, x: np.ndarray) -> np.ndarray:
    X = np.column_stack([np.ones_like(x), x])
    return y - X @ np.linalg.lstsq(X, y, rcond=None)[0]


def partial_r(a: np.ndarray, b: np.ndarray, x: np.ndarray) -> float:
    ra, rb = residuals(a, x), residuals(b, x)
    return float(np.corrcoef(ra, rb)[0, 1])


def noise_share(correct: np.ndarray, x: np.ndarray, rng: np.random.Generator, draws: int = 400) -> float:
    """The item-noise share of a residual series: ``correct`` (checkpoints x items, 0/1), ``x`` the
    in-domain series it is regressed on (held fixed)."""
    y = correct.mean(1)
    res = residuals(y, x)
    idx = rng.integers(0, correct.shape[1], (draws, correct.shape[1]))
    boot = np.stack([residuals(correct[:, i].mean(1), x) for i in idx])
    return float(boot.var(0).sum() / (res**2).sum())


def large_scores(root: Path, config: dict, configfile: Path, n: int, work: Path) -> pd.DataFrame:
    """Accuracy of every run's checkpoints on every testset of ``config`` at ``n`` examples."""
    plan = load(config, REPO, [configfile])
    exp = plan.exp
    sets = [t for d in plan.testsets for t, _ in plan.testsets[d]]
    rows = []
    for name in dict.fromkeys(sets):
        spec = dict(exp.dataset_params(name))
        spec["seed"] = int(spec.get("seed", 0)) + 100
        spec["n"] = 2 * n if spec.get("where") else n
        recs, prov = prepare(name, spec, plan.label_mode)
        data, meta = work / f"{name}.jsonl", work / f"{name}.meta.json"
        write_jsonl_atomic(data, recs)
        write_json_atomic(meta, prov)
        for model in plan.models:
            wc = SimpleNamespace(model=model, testset=name)
            tok = plan.tokenize_params(wc)
            cache = work / f"{model}-{name}.pt"
            tokenize_testset(
                **{k: tok[k] for k in ("model_spec", "built_model_dir", "labels", "prompt", "max_length", "coarse")},
                testset=name,
                data_path=str(data),
                data_meta=str(meta),
                out_path=str(cache),
            )
            for run in plan.runs:
                if run.model != model:
                    continue
                wc = SimpleNamespace(
                    model=model, indomain=run.in_domain, ntrain=str(run.n_train), seed=str(run.seed), testset=name
                )
                job = plan.eval_params(wc)
                outs = [str(work / f"{run.id.replace('/', '_')}-{s}-{name}.parquet") for s in run.steps]
                manifest = str(root / "finetune" / run.id / "manifest.json")
                res = evaluate_run(
                    EvalParams.from_mapping(job),
                    checkpoints=checkpoints_to_score([manifest], list(run.steps), outs),
                    tokenized=str(cache),
                    batch_size=64,
                    max_tokens=8192,
                    testset=name,
                )
                for rec in res["checkpoints"]:
                    rows.append({"model": model, "step": rec["step"], "testset": name, "accuracy": rec["accuracy"]})
                    rows[-1]["n"] = rec["n"]
        print(f"{name}: {len(recs)} examples scored", file=sys.stderr, flush=True)
    return pd.DataFrame(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("experiment", help="the finished default's results folder, e.g. results/default")
    ap.add_argument("--n", type=int, default=10000, help="examples per testset (default 10000)")
    ap.add_argument("--configfile", default=str(REPO / "config/config.yaml"), help="the experiment's config")
    ap.add_argument("--out", help="also write the numbers as JSON here")
    ap.add_argument("--large", help="the larger sample's accuracies (CSV): read if it exists, else scored and written")
    args = ap.parse_args(argv)
    root = Path(args.experiment)
    config = read_config(args.configfile)
    t0 = time.time()
    if args.large and Path(args.large).exists():
        big = pd.read_csv(args.large)
        if set(big["n"]) != {args.n}:
            raise SystemExit(f"{args.large} holds {sorted(set(big['n']))} examples per testset, not --n {args.n}")
    else:
        with tempfile.TemporaryDirectory(prefix="planted-") as tmp:
            big = large_scores(root, config, Path(args.configfile), args.n, Path(tmp))
        if args.large:
            big.to_csv(args.large, index=False)
    seconds = time.time() - t0
    run = pd.read_csv(root / "scores.csv")
    pcs = pd.read_csv(root / "analysis/partial_correlations.csv")
    pcs = pcs[(pcs.method == "pearson") & (pcs.residualiser == "linear") & (pcs.run != "pooled")]
    agree = pd.read_csv(root / "analysis/agreement.csv")
    agree = agree[(agree.method == "pearson") & (agree.residualiser == "linear")]
    rng = np.random.default_rng(0)
    out = {"n": args.n, "seconds": round(seconds, 1), "models": {}}
    big = big[big["model"].isin(set(run["model"]))]  # a larger table may hold more models (another experiment's)
    for model, g in big.groupby("model"):
        ind = g[g.testset.isin(run.loc[run.role == "in-domain", "testset"])].sort_values("step")
        x = ind.accuracy.to_numpy()
        series = {t: h.sort_values("step").accuracy.to_numpy() for t, h in g.groupby("testset")}
        mine = run[run.model == model]
        x_run = mine[mine.role == "in-domain"].sort_values("step").accuracy.to_numpy()
        ood = sorted(mine.loc[mine.role == "ood", "testset"].unique())
        sets = {}
        for t in ood:
            h = mine[mine.testset == t].sort_values("step")
            correct = np.stack([pd.read_parquet(p)["correct"].to_numpy() for p in h.predictions])
            sets[t] = {
                "resid_sd_run": float(residuals(h.accuracy.to_numpy(), x_run).std()),
                "resid_sd_large": float(residuals(series[t], x).std()),
                "item_noise_share_run": noise_share(correct, x_run, rng),
            }
        pairs = []
        for i, a in enumerate(ood):
            for b in ood[i + 1 :]:
                row = pcs[(pcs.model == model) & (((pcs.x == a) & (pcs.y == b)) | ((pcs.x == b) & (pcs.y == a)))]
                verdict = agree[((agree.x == a) & (agree.y == b)) | ((agree.x == b) & (agree.y == a))]
                pairs.append(
                    {
                        "x": a,
                        "y": b,
                        "r_large": round(partial_r(series[a], series[b], x), 3),
                        "r_run": round(float(row.r.iloc[0]), 3) if len(row) else None,
                        "p_adj_run": float(row.p_adj.iloc[0]) if len(row) else None,
                        "verdict": verdict.verdict.iloc[0] if len(verdict) else None,
                    }
                )
        out["models"][model] = {"testsets": sets, "pairs": pairs}
        print(f"\n{model}: residual sd after in-domain (run / {args.n}), item-noise share of the run's residual")
        for t, v in sets.items():
            print(f"  {t:18s} {v['resid_sd_run']:.4f} / {v['resid_sd_large']:.4f}   {v['item_noise_share_run']:.2f}")
        print(f"{model}: partial r at {args.n} examples, in the run (Holm-adjusted p), the answer's verdict")
        for p in pairs:
            run_r = f"{p['r_run']:+.3f} ({p['p_adj_run']:.2g})" if p["r_run"] is not None else "not in the run"
            print(f"  {p['x']:18s} {p['y']:18s} {p['r_large']:+.3f}   {run_r}  {p['verdict']}")
    print(f"\n{seconds:.0f} s")
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
