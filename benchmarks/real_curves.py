"""Real curved series under the default and the line: the BigScience 1B3 ablation runs (five
pretraining runs of one architecture on five corpora, 34-66 checkpoints, 27 tasks' accuracies;
../shared/data/external/bigscience_1b3_checkpoints, SOURCE.md there).

Each run is a model of the answer (one run each), LAMBADA's accuracy the in-domain column (as
for Pythia), every other task's ``acc`` an OOD testset, each score with its testset's size read
back from the binomial standard error (``n``, so the in-domain noise is bounded). The analysis runs
with the default residualiser (``spline``) and with the line, and each pair's per-model partial
correlation is recomputed on a flexible fit, a cubic polynomial in the in-domain score. Reported:
how many pairs each answer gives a sign, ``models differ`` or ``sign reversal``; how many pairs
depend on the form; and the strong signs (|consensus| >= 0.3) each states that the cubic does not
support (the cubic's Fisher-mean over the models of the other sign, or below 0.1 in size).

    .venv/bin/python benchmarks/real_curves.py --out benchmarks/latest/real_curves.json
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from datetime import datetime
from pathlib import Path

import numpy as np
import pandas as pd

from oodcorr.analysis import Options, agreement, analyse
from oodcorr.core.answer import states_a_sign

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "external" / "bigscience_1b3_checkpoints"
IN_DOMAIN = "lambada"


def read(folder: Path) -> pd.DataFrame:
    rows = []
    for f in sorted(folder.glob("*_agg.json")):
        d = json.loads(f.read_text())
        model = f.name.split("-")[0]
        for task, m in d["results"].items():
            if "acc" not in m:
                continue
            for step, acc, se in zip(d["checkpoints"], m["acc"], m.get("acc_stderr", [math.nan] * len(m["acc"]))):
                n = round(acc * (1 - acc) / se**2) if se and se > 0 else math.nan
                rows.append((model, IN_DOMAIN, "r0", int(step), task, float(acc), n))
    return pd.DataFrame(rows, columns=["model", "in_domain", "run", "unit", "testset", "score", "n"])


def cubic_r(long: pd.DataFrame) -> dict:
    """Each pair's Fisher-mean over the models of the partial r on a cubic in the in-domain score."""
    out: dict = {}
    for _, g in long.groupby("model"):
        w = g.pivot(index="unit", columns="testset", values="score").dropna()
        z = w[IN_DOMAIN].to_numpy(float)
        zs = (z - z.mean()) / z.std()
        X = np.column_stack([np.ones(len(z)), zs, zs**2, zs**3])
        H = X @ np.linalg.pinv(X)
        res = {t: w[t].to_numpy(float) - H @ w[t].to_numpy(float) for t in w.columns if t != IN_DOMAIN}
        names = sorted(res)
        for i, a in enumerate(names):
            for b in names[i + 1 :]:
                r = float(np.corrcoef(res[a], res[b])[0, 1])
                out.setdefault((a, b), []).append(np.arctanh(np.clip(r, -0.9999, 0.9999)))
    return {k: float(np.tanh(np.mean(v))) for k, v in out.items()}


def summary(answer: pd.DataFrame, cubic: dict) -> dict:
    signs = answer[answer["verdict"].map(states_a_sign)]
    strong = signs[signs["r_consensus"].abs() >= 0.3]
    unsupported = [
        f"{x} × {y}: {v} ({r:+.2f}; cubic {cubic[(x, y)]:+.2f})"
        for x, y, v, r in zip(strong["x"], strong["y"], strong["verdict"], strong["r_consensus"])
        if np.sign(cubic[(x, y)]) != np.sign(r) or abs(cubic[(x, y)]) < 0.1
    ]
    return {
        "pairs": int(len(answer)),
        "verdicts": answer["verdict"].value_counts().to_dict(),
        "a_sign": int(len(signs)),
        "models_differ_or_reversal": int(answer["verdict"].str.contains("differ|reversal").sum()),
        "depend_on_the_form": int((answer["form"] != "").sum()),
        "strong_signs": int(len(strong)),
        "strong_signs_the_cubic_does_not_support": unsupported,
        "median_abs_consensus": float(answer["r_consensus"].abs().median()),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--folder", type=Path, default=DATA)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    if not args.folder.is_dir():
        sys.exit(f"no folder {args.folder}: the BigScience tables live in ../shared/data/external/")
    long = read(args.folder)
    cubic = cubic_r(long)
    out = {"command": " ".join(sys.argv), "date": datetime.now().isoformat(timespec="seconds")}
    out["cubic_median_abs_mean_r"] = float(np.median(np.abs(list(cubic.values()))))
    for res in ("spline", "linear"):
        answer = agreement(analyse(long, Options(residualisers=(res,), pool_by=(), example_boot=0)))
        out[res] = summary(answer, cubic)
    text = json.dumps(out, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
