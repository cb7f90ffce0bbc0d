"""What verifying a checkpoint's sha256 costs, first and then from the cache.

The finetune's "every scheduled checkpoint exists" shortcut and its resume search
compare each weight file's sha256 with the checkpoint's manifest
(``oodcorr.jobs.checkpoints.verify_checkpoint(full=True)``). A file's hash is computed once
and cached beside it, keyed by its stat. This measures, on a fake checkpoint of
``--mib`` MiB of random bytes (no model needed):

* ``manifest_s``: writing the manifest (hashes every file; also fills the cache);
* ``uncached_s``: a full verification with the cache deleted (hashes every file);
* ``cached_s``: a full verification with the cache in place (hashes nothing).

    .venv/bin/python benchmarks/checkpoint_verify.py --mib 1024 --reps 3 --out benchmarks/latest/checkpoint_verify.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path

from oodcorr.jobs.checkpoints import VERIFIED, verify_checkpoint, write_ckpt_manifest


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mib", type=int, default=1024, help="size of the fake checkpoint's weight file")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", help="write every repetition here as JSON")
    args = ap.parse_args()
    reps = []
    with tempfile.TemporaryDirectory(prefix="oodcorr-verify-") as tmp:
        ckpt = Path(tmp) / "checkpoint-100"
        ckpt.mkdir()
        with open(ckpt / "model.safetensors", "wb") as fh:
            for _ in range(args.mib):
                fh.write(os.urandom(1 << 20))
        for _ in range(args.reps):
            t0 = time.perf_counter()
            write_ckpt_manifest(ckpt, 100, resumable=False)
            t1 = time.perf_counter()
            (ckpt / VERIFIED).unlink()
            t2 = time.perf_counter()
            assert verify_checkpoint(ckpt, full=True)[0]
            t3 = time.perf_counter()
            assert verify_checkpoint(ckpt, full=True)[0]
            t4 = time.perf_counter()
            reps.append(
                {"manifest_s": round(t1 - t0, 3), "uncached_s": round(t3 - t2, 3), "cached_s": round(t4 - t3, 5)}
            )
            print(reps[-1], flush=True)
    result = {
        "mib": args.mib,
        "reps": reps,
        "machine": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "date": time.strftime("%Y-%m-%d %H:%M"),
    }
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
