"""Open what was logged: start TensorBoard's viewer and MLflow's UI on 127.0.0.1 over a small logged
experiment, fetch a page and the runs from each, and stop them (benchmarks/README.md §18).

The experiment folder is laid out as the workflow lays it out (docs/outputs.md#opening-what-was-logged):
a finetuning run's event files in ``finetune/<model>/<task>/n<N>/seed<S>/tensorboard/`` (written by the
pinned ``tensorboardX``) beside the answer's in ``tensorboard/``, and an MLflow file store in ``mlruns/``
(written by this Python's MLflow client, the ``[mlflow]`` extra or the tests' ``mlflow-skinny``).
The servers are the commands the docs give, with ``--logdir`` the experiment folder: the check is that
TensorBoard lists both the run and the answer, and that MLflow's UI serves its page and lists the
experiment. Every server listens on 127.0.0.1 alone, is waited for at most ``--timeout`` seconds, and is
stopped (its process group) however the check ends.

    .venv/bin/python benchmarks/open_trackers.py --mlflow /path/to/env/bin/mlflow

``--mlflow`` defaults to the ``mlflow`` beside this Python; ``--skip-mlflow`` checks TensorBoard alone.
Prints one JSON line per server (status, seconds to the first page, what it listed); exit status 1 if
any check fails.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

HOST = "127.0.0.1"
RUN = "finetune/tiny-opt/synth/n200/seed0/tensorboard"
EXPERIMENT = "oodcorr-default"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def _get(url: str, timeout: float = 5.0) -> tuple[int, str]:
    # loopback only: the URLs are built from HOST, never from input
    with urllib.request.urlopen(url, timeout=timeout) as r:  # noqa: S310
        return r.status, r.read().decode("utf-8", "replace")


def _wait(url: str, proc: subprocess.Popen, timeout: float) -> float:
    """Seconds until ``url`` answers 200; raises where the server exits or ``timeout`` passes."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with status {proc.returncode} before answering {url}")
        try:
            if _get(url, 2.0)[0] == 200:
                return time.monotonic() - start
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
            pass
        time.sleep(0.25)
    raise TimeoutError(f"{url} did not answer within {timeout:g} s")


def _start(cmd: list[str], log: Path, env: dict | None = None) -> subprocess.Popen:
    fh = open(log, "w")  # noqa: SIM115 (closed with the process)
    return subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True)


def _stop(proc: subprocess.Popen) -> None:
    """Stop the server and whatever it started (its own process group, by its id)."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def log_experiment(root: Path) -> None:
    """A small experiment as the workflow logs it: a run's scores and the answer's lines (TensorBoard),
    the run's scores in an MLflow file store."""
    from tensorboardX import SummaryWriter

    with SummaryWriter(logdir=str(root / RUN)) as w:
        for step in range(0, 50, 10):
            w.add_scalar("ood/synth-no/accuracy", 0.5 + step / 200, step)
            w.add_scalar("train/loss", 1.0 - step / 100, step)
    with SummaryWriter(logdir=str(root / "tensorboard")) as w:
        w.add_text("answer", "in-domain synth-test: 10 pairs, a sign for 0", 0)
    os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"
    try:
        from mlflow.tracking import MlflowClient
    except ImportError:
        return
    client = MlflowClient(tracking_uri=str(root / "mlruns"))
    exp = client.create_experiment(EXPERIMENT)
    run = client.create_run(exp, run_name="tiny-opt/synth/n200/seed0")
    for step in range(0, 50, 10):
        client.log_metric(run.info.run_id, "ood/synth-no/accuracy", 0.5 + step / 200, step=step)
    client.set_terminated(run.info.run_id)


def check_tensorboard(binary: str, root: Path, timeout: float) -> dict:
    port = _free_port()
    proc = _start([binary, "--logdir", str(root), "--host", HOST, "--port", str(port)], root / "tensorboard.log")
    try:
        first = _wait(f"http://{HOST}:{port}/", proc, timeout)
        status, page = _get(f"http://{HOST}:{port}/")
        runs = []
        until = time.monotonic() + timeout  # TensorBoard reads the event files after it answers
        while time.monotonic() < until and not {RUN, "tensorboard"} <= set(runs):
            runs = json.loads(_get(f"http://{HOST}:{port}/data/runs")[1])
            time.sleep(0.5)
        ok = status == 200 and "<html" in page.lower() and {RUN, "tensorboard"} <= set(runs)
        return {"server": "tensorboard", "ok": ok, "status": status, "first_page_s": round(first, 2), "runs": runs}
    finally:
        _stop(proc)


def check_mlflow(binary: str, root: Path, timeout: float) -> dict:
    port = _free_port()
    env = dict(os.environ, MLFLOW_ALLOW_FILE_STORE="true")
    cmd = [binary, "ui", "--backend-store-uri", str(root / "mlruns"), "--host", HOST, "--port", str(port)]
    proc = _start(cmd, root / "mlflow.log", env)
    try:
        first = _wait(f"http://{HOST}:{port}/", proc, timeout)
        status, page = _get(f"http://{HOST}:{port}/")
        found = json.loads(_get(f"http://{HOST}:{port}/ajax-api/2.0/mlflow/experiments/search?max_results=50")[1])
        names = [e["name"] for e in found.get("experiments", [])]
        ok = status == 200 and "mlflow" in page.lower() and EXPERIMENT in names
        return {"server": "mlflow", "ok": ok, "status": status, "first_page_s": round(first, 2), "experiments": names}
    finally:
        _stop(proc)


def main(argv: list[str] | None = None) -> int:
    here = Path(sys.executable).parent
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tensorboard", default=str(here / "tensorboard"), help="TensorBoard's command")
    ap.add_argument("--mlflow", default=str(here / "mlflow"), help="MLflow's command (a package with its UI)")
    ap.add_argument("--skip-mlflow", action="store_true", help="check TensorBoard alone")
    ap.add_argument("--timeout", type=float, default=180.0, help="seconds to wait for each server")
    args = ap.parse_args(argv)
    failed = False
    with tempfile.TemporaryDirectory(prefix="open-trackers-") as tmp:
        root = Path(tmp) / "results" / "default"
        root.mkdir(parents=True)
        log_experiment(root)
        checks = [("tensorboard", check_tensorboard, args.tensorboard)]
        if not args.skip_mlflow:
            checks.append(("mlflow", check_mlflow, args.mlflow))
        for name, check, binary in checks:
            try:
                got = check(binary, root, args.timeout)
            except (OSError, RuntimeError, TimeoutError, ValueError) as e:
                log = root / f"{name}.log"
                tail = log.read_text(errors="replace")[-600:] if log.exists() else ""
                got = {"server": name, "ok": False, "error": str(e), "log_tail": tail}
            failed |= not got["ok"]
            print(json.dumps(got))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
