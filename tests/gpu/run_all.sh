#!/usr/bin/env bash
# Every check that needs a GPU, in one go, each under its own time limit (a lent device machine
# is paid by the minute, so nothing may hang): run from the repository root on the GPU machine,
#   bash tests/gpu/run_all.sh OUTDIR [SECONDS]        # SECONDS: the whole budget, default 540
# 1. tests/gpu/device_check.py: the device pool, FSDP finetuning of a tiny model, and the real
#    decoder of config/real-lm.yaml finetuned and scored on the GPU (two thirds of the budget);
# 2. the 1B bfloat16 scoring throughput (benchmarks/evaluator_vs_lmeval.py --skip-lmeval: our
#    evaluator alone on the OPT-1.3b shape; the remaining third).
# Each part writes its JSON under OUTDIR; a part that runs out of time is killed and reported.
set -u
out=${1:-gpu_out}
budget=${2:-540}
mkdir -p "$out"
py=${PYTHON:-.venv/bin/python}
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
status=0
timeout --kill-after=10 $((budget * 2 / 3)) "$py" tests/gpu/device_check.py "$out/device_check" \
    > "$out/device_check.log" 2>&1 || { echo "device_check.py: exit $? (see $out/device_check.log)"; status=1; }
timeout --kill-after=10 $((budget / 3)) "$py" benchmarks/evaluator_vs_lmeval.py --skip-lmeval --arch 1b \
    --dtype bfloat16 --device cuda --reps 3 --limit 600 --workdir "$out/bench" --out "$out/throughput_1b_bf16.json" \
    > "$out/throughput_1b_bf16.log" 2>&1 || { echo "1B bf16 throughput: exit $? (see $out/throughput_1b_bf16.log)"; status=1; }
exit $status
