"""Give every running GPU job its own device(s) on a machine with several GPUs.

``snakemake --cores N --resources gpu=K`` runs at most K GPU jobs at once, but
Snakemake assigns no device ids: without help every job would use GPU 0. Here
each job claims device ids from a pool of lock files, one per visible device,
and narrows ``CUDA_VISIBLE_DEVICES`` to what it claimed before CUDA starts.

The locks are ``fcntl.flock`` locks held by an open file for the life of the
job's process. The kernel drops them when the process ends in any way (a
normal exit, an exception, SIGKILL from an OOM killer), so a killed job never
leaves a device claimed.

The visible devices are ``CUDA_VISIBLE_DEVICES`` when it is set (a SLURM
allocation, a user's own narrowing), else the GPUs ``nvidia-smi`` lists. The
lock folder is per user and, inside a SLURM job, per job (each allocation
numbers its own devices); ``OODCORR_GPU_LOCK_DIR`` overrides it, for example to
share one pool between users of a workstation.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

LOCK_DIR_ENV = "OODCORR_GPU_LOCK_DIR"


class GpuPoolError(RuntimeError):
    """A job asked for more GPUs than exist, or waited too long for a free one."""


def visible_devices(env: dict | None = None) -> list[str]:
    """Device ids this process may use, in CUDA's numbering; [] when there are none."""
    env = os.environ if env is None else env
    cvd = env.get("CUDA_VISIBLE_DEVICES")
    if cvd is not None:
        out = []
        for d in (x.strip() for x in cvd.split(",")):
            if not d or d.startswith("-"):  # CUDA ignores everything from an invalid entry on
                break
            out.append(d)
        return out
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    # asking torch would start CUDA in this process, after which narrowing the
    # visible devices has no effect; nvidia-smi does not
    r = subprocess.run([smi, "--query-gpu=index", "--format=csv,noheader"], capture_output=True, text=True)
    if r.returncode != 0:
        return []
    return [x.strip() for x in r.stdout.splitlines() if x.strip().isdigit()]


def default_lock_dir(env: dict | None = None) -> Path:
    env = os.environ if env is None else env
    if env.get(LOCK_DIR_ENV):
        return Path(env[LOCK_DIR_ENV])
    name = f"oodcorr-gpus-{os.getuid()}"
    if env.get("SLURM_JOB_ID"):
        name += f"-slurm{env['SLURM_JOB_ID']}"
    return Path(tempfile.gettempdir()) / name


@dataclass
class Claim:
    """Devices held by this process; the locks go when ``release()`` runs or the process ends."""

    devices: list[str]
    lock_dir: Path
    _fds: list[int] = field(default_factory=list, repr=False)

    def release(self) -> None:
        for fd in self._fds:
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)
        self._fds = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()


def _lock_path(lock_dir: Path, device: str) -> Path:
    return lock_dir / f"gpu-{re.sub(r'[^A-Za-z0-9._-]', '_', device)}.lock"


def _try_lock(path: Path) -> int | None:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        os.close(fd)
        if e.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
            return None
        raise
    # who holds it, for people looking at the folder (the lock itself is what counts)
    os.ftruncate(fd, 0)
    os.write(fd, f"pid {os.getpid()} since {time.strftime('%Y-%m-%dT%H:%M:%S')}\n".encode())
    return fd


def claim(
    n: int = 1,
    *,
    devices: list[str] | None = None,
    lock_dir: str | Path | None = None,
    timeout: float | None = None,
    poll: float = 0.5,
) -> Claim:
    """Claim ``n`` devices nobody else holds, waiting for them if all are taken.

    A job that needs several devices gets all of them or none in each pass (so
    two such jobs never each hold half of what the other needs).
    """
    devices = visible_devices() if devices is None else list(devices)
    if n < 1:
        raise ValueError(f"claim: n must be at least 1, got {n}")
    if n > len(devices):
        raise GpuPoolError(
            f"the job needs {n} GPU(s) but only {len(devices)} are visible "
            f"({','.join(devices) or 'none'}); lower the rule's `gpu` resource or "
            "make more devices visible (CUDA_VISIBLE_DEVICES)"
        )
    lock_dir = Path(lock_dir) if lock_dir is not None else default_lock_dir()
    lock_dir.mkdir(parents=True, exist_ok=True)
    start = last_note = time.monotonic()
    while True:
        got: list[tuple[str, int]] = []
        for d in devices:
            fd = _try_lock(_lock_path(lock_dir, d))
            if fd is not None:
                got.append((d, fd))
                if len(got) == n:
                    return Claim([g for g, _ in got], lock_dir, [f for _, f in got])
        for _, fd in got:  # not enough this pass: hold nothing while waiting
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
        now = time.monotonic()
        if timeout is not None and now - start >= timeout:
            raise GpuPoolError(f"no {n} free GPU(s) among {devices} after {timeout:.0f} s (locks in {lock_dir})")
        if now - last_note >= 60:
            log.info("still waiting for %d free GPU(s) among %s (locks in %s)", n, devices, lock_dir)
            last_note = now
        time.sleep(poll)


_HELD: list[Claim] = []


def claim_for_job(n: int, env: dict | None = None) -> list[str]:
    """Claim ``n`` devices for the rest of this process and narrow ``CUDA_VISIBLE_DEVICES`` to them.

    Call before anything starts CUDA. Returns the claimed ids, or [] when no
    device is visible at all (a CPU machine): the job then runs on the CPU.
    """
    env = os.environ if env is None else env
    held = [d for c in _HELD for d in c.devices]
    if len(held) >= n:  # asked again in the same process: what it holds already
        return held[:n]
    devices = visible_devices(env)
    if not devices:
        return []
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        raise GpuPoolError("CUDA was started before a GPU was claimed; call pick_device() first")
    c = claim(n, devices=devices, lock_dir=default_lock_dir(env))
    _HELD.append(c)  # keep the locks open until the process exits
    if env.get("CUDA_VISIBLE_DEVICES") is None:
        env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"  # nvidia-smi's numbering
    env["CUDA_VISIBLE_DEVICES"] = ",".join(c.devices)
    log.info("claimed GPU %s of %s (locks in %s)", ",".join(c.devices), ",".join(devices), c.lock_dir)
    return c.devices
