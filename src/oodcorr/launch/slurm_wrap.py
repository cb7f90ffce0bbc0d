"""SLURM's commands as the SLURM executor runs them, made to wait out a controller that does not answer.

The executor (2.8) drops, without a word, the jobs of a status round whose every attempt failed, and
Snakemake then waits for them forever; a restarted slurmctld is enough. So a run on SLURM puts these
wrappers first on its PATH (:func:`install`): ``squeue`` and ``sbatch`` are retried while slurmctld
does not answer (``squeue`` then answered by the controller's last answer), ``scontrol show config`` by
its last answer (first read at the start), and where the profile says ``slurm-no-account``, the executor's
account guess (``sacct`` with a pipe passed as arguments: it never reads that setting) by ``none``.
Every other call, and every answer of a controller that answers, passes through unchanged.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

from ..core.atomic_write import write_text_atomic
from .slurm_cluster import DIR_ENV, controller_answers, unwrapped_path

WRAPPED = ("squeue", "sbatch", "scontrol")
NO_ACCOUNT = "sacct"  # wrapped too where the profile says slurm-no-account
WAIT_S = {"squeue": 45.0, "sbatch": 600.0}
CONFIG_WAIT_S = 5.0
PAUSE_S = 2.0
CONFIG_CACHE = "scontrol-show-config.txt"
LAST_ANSWER = "squeue-{}.txt"  # the controller's last answer to one squeue query (its arguments' digest)


def install(folder: str | os.PathLike, config_text: str, no_account: bool = False) -> Path:
    folder = Path(folder).resolve()
    bin_dir = folder / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    if config_text:
        write_text_atomic(folder / CONFIG_CACHE, config_text)
    if not no_account:
        (bin_dir / NO_ACCOUNT).unlink(missing_ok=True)  # an earlier run's, under another profile
    for name in (*WRAPPED, NO_ACCOUNT) if no_account else WRAPPED:
        script = (
            "#!/bin/sh\n"
            f"# written by oodcorr (src/oodcorr/launch/slurm_wrap.py): SLURM's {name}, waiting out a controller away\n"
            f'exec {shlex.quote(sys.executable)} -m oodcorr.launch.slurm_wrap {name} "$@"\n'
        )
        path = bin_dir / name
        if not path.exists() or path.read_text(errors="replace") != script:
            write_text_atomic(path, script)
        path.chmod(0o755)
    os.environ[DIR_ENV] = str(folder)
    os.environ["PATH"] = os.pathsep.join(p for p in (str(bin_dir), unwrapped_path()) if p)
    return bin_dir


def _emit(res: subprocess.CompletedProcess) -> int:
    sys.stdout.buffer.write(res.stdout or b"")
    sys.stdout.buffer.flush()
    sys.stderr.buffer.write(res.stderr or b"")
    sys.stderr.buffer.flush()
    return res.returncode


def main(argv: list[str]) -> int:
    """``python -m oodcorr.launch.slurm_wrap <command> <args...>``, as :func:`install`'s scripts run it."""
    name, args = argv[0], argv[1:]
    if name == NO_ACCOUNT and "|" in args:  # the executor's account guess (docstring): no account
        print("none", flush=True)
        return 0
    folder = Path(os.environ[DIR_ENV]) if os.environ.get(DIR_ENV) else None
    os.environ["PATH"] = unwrapped_path()  # from here on every command found on PATH is SLURM's own
    try:
        stdin = sys.stdin.buffer.read() if not sys.stdin.isatty() else None
    except (OSError, ValueError):
        stdin = None
    cmd = [name, *args]
    config = name == "scontrol" and args == ["show", "config"]  # its last answer stands in, as squeue's
    try:
        deadline = time.monotonic() + WAIT_S.get(name, 0.0)
        digest = hashlib.sha256("\0".join(args).encode()).hexdigest()[:16]
        saved = LAST_ANSWER.format(digest) if name == "squeue" else CONFIG_CACHE if config else None
        last = folder / saved if saved and folder else None
        while True:
            timeout = max(deadline - time.monotonic(), 1.0) if name == "squeue" else CONFIG_WAIT_S if config else None
            try:
                res = subprocess.run(cmd, input=stdin, capture_output=True, timeout=timeout)
            except subprocess.TimeoutExpired:
                res = None
            if res is not None and (res.returncode == 0 or (not config and controller_answers())):
                if last is not None and res.returncode == 0:
                    write_text_atomic(last, res.stdout.decode(errors="replace"))
                return _emit(res)
            if time.monotonic() + PAUSE_S >= deadline:
                if last is not None and last.is_file():
                    sys.stdout.write(last.read_text(errors="replace"))
                    print(
                        f"{name}: SLURM's controller does not answer: its last answer (oodcorr's wrapper)",
                        file=sys.stderr,
                    )
                    return 0
                if res is None:
                    print(f"{name}: no answer from SLURM's controller (oodcorr's wrapper)", file=sys.stderr)
                    return 1
                return _emit(res)
            time.sleep(PAUSE_S)
    except FileNotFoundError:
        print(f"{name}: not found on PATH (oodcorr's wrapper)", file=sys.stderr)
        return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
