"""Time and peak memory of ``oodcorr analyse`` on a whole lm-eval suite (issue 38: the Pythia suite,
432 files, 65 tasks with ``acc``, 16 models, figures included, in at most 60 s normalised and 600 MB),
and the cost curve over tasks and models.

Each run is the installed command in a fresh process under ``/usr/bin/time -v`` (wall, CPU, the
largest process's peak RSS), while this script samples the memory of the command's whole process
tree every 0.5 s (the figures are drawn in forked processes): PSS, which counts a page the processes
share once, and RSS summed, which counts it once per process. A fp32 GEMM
(``torch.mm``, 2048 x 2048 x 2048, two threads) is measured before and after each run: on a shared
machine its throughput says how much of the machine the run had, and the **normalised** wall time is
``wall x GEMM during the run / reference GEMM`` (the reference: 188 GFLOP/s, the quiet two-core
VM's, benchmarks/README.md#12-batching-padding-and-scoring-throughput). The tasks of a point are
the in-domain task, the first 7 OOD tasks of the 8-task table and then the others in name order;
its models, the first in name order (through a folder of links).

    .venv/bin/python benchmarks/suite_scale.py --folder /path/to/pythia/evals/pythia-v1 \\
        --out benchmarks/latest/suite_scale.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path

REFERENCE_GFLOPS = 188.0
FIRST = ["arc_challenge", "arc_easy", "logiqa", "piqa", "sciq", "winogrande", "wsc"]


def gemm(min_s: float = 2.0) -> float:
    """GFLOP/s of fp32 ``torch.mm`` 2048^3 on two threads, best of repetitions within ``min_s``."""
    import torch

    torch.set_num_threads(2)
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(2048, 2048, generator=g), torch.randn(2048, 2048, generator=g)
    torch.mm(a, b)
    best, t_end = 0.0, time.time() + min_s
    while time.time() < t_end:
        t = time.perf_counter()
        torch.mm(a, b)
        best = max(best, 2 * 2048**3 / (time.perf_counter() - t) / 1e9)
    return round(best, 1)


def _tree_memory(root: int) -> tuple[int, int]:
    """(summed RSS, summed PSS) in bytes of ``root`` and its descendants: RSS counts a page shared by
    forked processes once per process, PSS divides it among them (what the tree really holds)."""
    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                ppid = int(re.search(r"^PPid:\s+(\d+)", Path(f"/proc/{d}/status").read_text(), re.M).group(1))
            except (OSError, AttributeError):
                continue
            children.setdefault(ppid, []).append(int(d))
    rss = pss = 0
    todo = [root]
    while todo:
        p = todo.pop()
        todo += children.get(p, [])
        try:
            text = Path(f"/proc/{p}/smaps_rollup").read_text()
        except OSError:
            continue
        rss += sum(int(v) for v in re.findall(r"^Rss:\s+(\d+) kB", text, re.M)) * 1024
        pss += sum(int(v) for v in re.findall(r"^Pss:\s+(\d+) kB", text, re.M)) * 1024
    return rss, pss


def timed(cmd: list[str]) -> dict:
    proc = subprocess.Popen(["/usr/bin/time", "-v", *cmd], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak = [0, 0]

    def sample():
        while proc.poll() is None:
            rss, pss = _tree_memory(proc.pid)
            peak[0], peak[1] = max(peak[0], rss), max(peak[1], pss)
            time.sleep(0.5)

    th = threading.Thread(target=sample)
    th.start()
    out, err = proc.communicate()
    th.join()
    if proc.returncode != 0:
        raise SystemExit(f"failed ({proc.returncode}): {' '.join(cmd)}\n{err[-3000:]}")
    h, m, s = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (?:(\d+):)?(\d+):([\d.]+)", err).groups()
    user = float(re.search(r"User time \(seconds\): ([\d.]+)", err).group(1))
    system = float(re.search(r"System time \(seconds\): ([\d.]+)", err).group(1))
    return {
        "wall_s": int(h or 0) * 3600 + int(m) * 60 + float(s),
        "cpu_s": round(user + system, 1),
        "max_rss_mb_largest_process": int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", err).group(1))
        // 1024,
        "max_rss_mb_process_tree": peak[0] // 2**20,
        "max_pss_mb_process_tree": peak[1] // 2**20,
    }


def tasks_of(folder: Path, pattern: str, in_domain: str) -> list[str]:
    """Every task with ``acc`` in the first results file of the suite."""
    f = next(iter(sorted(folder.glob(pattern.replace("{model}", "*").replace("{step}", "*")))))
    res = json.loads(f.read_text())["results"]
    names = sorted(t for t, v in res.items() if "acc" in v and t != in_domain)
    return FIRST + [t for t in names if t not in FIRST]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--folder", type=Path, required=True)
    ap.add_argument("--path-pattern", default="{model}/zero-shot/*_step{step}.json")
    ap.add_argument("--in-domain", default="lambada_openai")
    ap.add_argument("--tasks", type=int, nargs="+", default=[8, 16, 32, 65], help="tasks, the in-domain one included")
    ap.add_argument("--models", type=int, nargs="+", default=[4, 8, 16])
    ap.add_argument("--extra", nargs="*", default=[], help="more arguments for oodcorr analyse")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    exe = str(Path(sys.executable).with_name("oodcorr"))
    models = sorted(p.name for p in args.folder.iterdir() if (p / args.path_pattern.split("/")[1]).is_dir())
    tasks = tasks_of(args.folder, args.path_pattern.replace("{model}", models[0]), args.in_domain)
    res = {"date": datetime.now().strftime("%Y-%m-%d %H:%M"), "machine": platform.platform(), "cores": os.cpu_count()}
    res.update(reference_gflops=REFERENCE_GFLOPS, runs=[])
    points = [(t, max(args.models)) for t in args.tasks] + [(max(args.tasks), m) for m in args.models[:-1]]
    with tempfile.TemporaryDirectory() as tmp:
        for n_tasks, n_models in points:
            sub = Path(tmp) / f"m{n_models}"
            if not sub.exists():
                sub.mkdir()
                for m in models[:n_models]:
                    (sub / m).symlink_to(args.folder / m)
            load0, g0 = os.getloadavg()[0], gemm()
            cmd = [exe, "analyse", str(sub), "--format", "lm-eval", "--in-domain", args.in_domain]
            cmd += ["--path-pattern", args.path_pattern, "--out", f"{tmp}/out-{n_tasks}-{n_models}", *args.extra]
            if n_tasks < len(tasks) + 1:
                cmd += ["--tasks", ",".join(tasks[: n_tasks - 1])]
            got = timed(cmd)
            g1, load1 = gemm(), os.getloadavg()[0]
            g = (g0 + g1) / 2
            got.update(
                tasks=n_tasks,
                models=n_models,
                pairs=(n_tasks - 1) * (n_tasks - 2) // 2,
                gemm_gflops=[g0, g1],
                load=[round(load0, 2), round(load1, 2)],
                normalised_wall_s=round(got["wall_s"] * g / REFERENCE_GFLOPS, 1),
            )
            res["runs"].append(got)
            print(
                f"{n_tasks:3d} tasks x {n_models:2d} models: {got['wall_s']:6.1f} s wall "
                f"({got['normalised_wall_s']:.1f} s normalised; GEMM {g0:.0f}/{g1:.0f} GFLOP/s, load {load0:.1f}/"
                f"{load1:.1f}), {got['cpu_s']:.0f} CPU-s; peak memory {got['max_pss_mb_process_tree']} MB (PSS of the "
                f"process tree; RSS {got['max_rss_mb_process_tree']} MB summed, {got['max_rss_mb_largest_process']} MB "
                "the largest process)",
                flush=True,
            )
    if args.out:
        args.out.write_text(json.dumps(res, indent=1) + "\n")


if __name__ == "__main__":
    main()
