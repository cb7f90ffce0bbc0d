"""Time and peak memory of ``oodcorr analyse`` on per-item correctness at a pretraining suite's scale
(issue 44: 16 models x 27 checkpoints x 65 tasks of the Pythia suite's real sizes, about 12 M rows in
the ``--examples`` form, in at most 120 s normalised and 2 GB).

The study is simulated item by item (:func:`oodcorr.analysis.simulate.items.answer_items`: items with
difficulties, item-by-checkpoint deviations persistent across checkpoints): each model's in-domain
ability is a learning curve over the 27 checkpoints, each task's population accuracy loads on it and
adds a residual AR(1) series of its own, and each of the 65 tasks (``lambada_openai``, in-domain, and
the 64 OOD tasks with ``acc``: :data:`SIZES`, their sizes read back from the suite's ``acc_stderr``) is
answered by each model at each checkpoint item by item. The scores table (``model, step, testset,
accuracy, n``) and the per-item table (``model, step, testset, example, correct``) are written as
parquet, and the installed command analyses them under ``/usr/bin/time -v`` with the defaults (every
figure and the explorer page included), as :mod:`suite_scale` runs the suite; the same GEMM before and
after normalises the wall time (benchmarks/README.md#15-a-whole-lm-eval-suite-and-the-explorer-page).

    .venv/bin/python benchmarks/item_noise_scale.py --out benchmarks/latest/item_noise_scale.json
    .venv/bin/python benchmarks/item_noise_scale.py --models 2 --extra --no-plots   # a quick look
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from suite_scale import REFERENCE_GFLOPS, gemm, timed  # noqa: E402

from oodcorr.analysis.simulate.items import answer_items  # noqa: E402

IN_DOMAIN = "lambada_openai"
# the Pythia suite's 65 tasks with acc and their items (read back from acc_stderr: sqrt(p (1 - p) / (n - 1)),
# the same at every checkpoint of every model)
SIZES = {
    "lambada_openai": 5153, "arc_easy": 2376, "piqa": 1838, "winogrande": 1267, "arc_challenge": 1172,
    "sciq": 1000, "logiqa": 651, "wsc": 104,
    **{f"hendrycksTest-{k}": v for k, v in {
        "professional_law": 1534, "moral_scenarios": 895, "miscellaneous": 783, "professional_psychology": 612,
        "high_school_psychology": 545, "high_school_macroeconomics": 390, "elementary_mathematics": 378,
        "moral_disputes": 346, "prehistory": 324, "philosophy": 311, "high_school_biology": 310, "nutrition": 306,
        "professional_accounting": 282, "professional_medicine": 272, "high_school_mathematics": 270,
        "clinical_knowledge": 265, "security_studies": 245, "high_school_microeconomics": 238,
        "high_school_world_history": 237, "conceptual_physics": 235, "marketing": 234, "human_aging": 223,
        "high_school_statistics": 216, "high_school_us_history": 204, "high_school_chemistry": 203, "sociology": 201,
        "high_school_geography": 198, "high_school_government_and_politics": 193, "college_medicine": 173,
        "world_religions": 171, "virology": 166, "high_school_european_history": 165, "logical_fallacies": 163,
        "astronomy": 152, "high_school_physics": 151, "electrical_engineering": 145, "college_biology": 144,
        "anatomy": 135, "human_sexuality": 131, "formal_logic": 126, "international_law": 121, "econometrics": 114,
        "machine_learning": 112, "public_relations": 110, "jurisprudence": 108, "management": 103,
        "college_physics": 102, "abstract_algebra": 100, "business_ethics": 100, "college_chemistry": 100,
        "college_computer_science": 100, "college_mathematics": 100, "computer_security": 100, "global_facts": 100,
        "high_school_computer_science": 100, "medical_genetics": 100, "us_foreign_policy": 100,
    }.items()},
}  # fmt: skip
STEPS = [0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1000, *range(3000, 143001, 10000)]


def simulate(models: int, seed: int = 0, tasks: dict | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(scores, items) of ``models`` models x :data:`STEPS` x ``tasks`` (default :data:`SIZES`)."""
    tasks = tasks or SIZES
    rng = np.random.default_rng(seed)
    T = len(STEPS)
    t = np.log1p(np.asarray(STEPS, float)) / np.log1p(STEPS[-1])
    size = np.linspace(0.3, 1.0, models)[:, None]
    ability = 1 / (1 + np.exp(-(8 * t[None, :] * size - 4))) + 0.01 * rng.normal(size=(models, T))
    scores, items = [], []
    for task, n in tasks.items():
        if task == IN_DOMAIN:
            acc = 0.05 + 0.65 * ability
        else:
            chance, top = (0.25, 0.45) if task.startswith("hendrycksTest") else (0.5, 0.8)
            e = np.zeros((models, T))
            for j in range(1, T):
                e[:, j] = 0.8 * e[:, j - 1] + 0.6 * rng.normal(size=models)
            acc = chance + (top - chance) * rng.uniform(0.3, 1.0) * ability + 0.015 * e
        mat = answer_items(rng, np.clip(acc, 0.02, 0.98), n, 0.5, 0.8)  # (models, T, n)
        for m in range(models):
            scores.append(
                pd.DataFrame({"model": f"m{m:02d}", "step": STEPS, "testset": task, "accuracy": mat[m].mean(1), "n": n})
            )
        items.append(
            pd.DataFrame(
                {
                    "model": np.repeat([f"m{m:02d}" for m in range(models)], T * n),
                    "step": np.tile(np.repeat(STEPS, n), models),
                    "testset": task,
                    "example": np.tile(np.arange(n), models * T),
                    "correct": mat.reshape(-1).astype(np.int8),
                }
            )
        )
    return pd.concat(scores, ignore_index=True), pd.concat(items, ignore_index=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", type=int, default=16)
    ap.add_argument("--extra", nargs=argparse.REMAINDER, default=[], help="more arguments for oodcorr analyse")
    ap.add_argument("--keep", type=Path, help="write the two tables and the analysis here (kept)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    exe = str(Path(sys.executable).with_name("oodcorr"))
    res = {"date": datetime.now().strftime("%Y-%m-%d %H:%M"), "machine": platform.platform(), "cores": os.cpu_count()}
    with tempfile.TemporaryDirectory() as tmp:
        where = args.keep or Path(tmp)
        where.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        scores, items = simulate(args.models)
        scores.to_parquet(where / "scores.parquet", index=False)
        items.to_parquet(where / "items.parquet", index=False)
        res.update(
            models=args.models,
            checkpoints=len(STEPS),
            tasks=len(SIZES),
            rows=len(items),
            items_bytes=(where / "items.parquet").stat().st_size,
            simulate_s=round(time.perf_counter() - t0, 1),
        )
        del scores, items
        cmd = [exe, "analyse", str(where / "scores.parquet"), "--unit", "step", "--in-domain", IN_DOMAIN]
        cmd += ["--examples", str(where / "items.parquet"), "--n-column", "n", "--out", str(where / "out")]
        cmd += args.extra
        load0, g0 = os.getloadavg()[0], gemm()
        got = timed(cmd)
        g1, load1 = gemm(), os.getloadavg()[0]
        g = (g0 + g1) / 2
        got.update(
            command=" ".join(cmd[1:]),
            gemm_gflops=[g0, g1],
            load=[round(load0, 2), round(load1, 2)],
            reference_gflops=REFERENCE_GFLOPS,
            normalised_wall_s=round(got["wall_s"] * g / REFERENCE_GFLOPS, 1),
        )
        res.update(got)
    print(
        f"{res['models']} models x {res['checkpoints']} checkpoints x {res['tasks']} tasks, {res['rows']:,} item rows: "
        f"{res['wall_s']:.1f} s wall ({res['normalised_wall_s']:.1f} s normalised; GEMM {g0:.0f}/{g1:.0f} GFLOP/s, "
        f"load {load0:.1f}/{load1:.1f}), {res['cpu_s']:.0f} CPU-s; peak memory {res['max_pss_mb_process_tree']} MB "
        f"(PSS of the process tree; RSS {res['max_rss_mb_process_tree']} MB summed, "
        f"{res['max_rss_mb_largest_process']} MB the largest process)",
        flush=True,
    )
    if args.out:
        args.out.write_text(json.dumps(res, indent=1) + "\n")


if __name__ == "__main__":
    main()
