"""Give every running GPU job its own device(s) on a machine with several GPUs.

Snakemake's ``--resources gpu=K`` bounds how many GPU jobs run, but assigns no device ids: every job
would use GPU 0. Each job claims ids from a pool of ``flock`` lock files, one per visible device, and
narrows ``CUDA_VISIBLE_DEVICES`` before CUDA starts; the kernel drops a claim when the job dies.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from .locks import UnsafeLockFile, open_lock_file

log = logging.getLogger(__name__)

LOCK_DIR_ENV = "OODCORR_GPU_LOCK_DIR"


class GpuPoolError(RuntimeError):
    """A job asked for more GPUs than exist, or waited too long for a free one."""


def visible_devices(env: dict) -> list[str]:
    """Device ids this process may use, in CUDA's numbering."""
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


def default_lock_dir(env: dict) -> Path:
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


def claim_devices(
    n: int,
    *,
    devices: list[str],
    lock_dir: Path,
    shared: bool,
    timeout: float | None = None,
    poll: float = 0.5,
) -> Claim:
    """Claim ``n`` of ``devices`` nobody else holds, all or none in each pass, waiting while they are taken."""
    if n > len(devices):
        raise GpuPoolError(
            f"the job needs {n} GPU(s) but only {len(devices)} are visible "
            f"({','.join(devices) or 'none'}); lower the rule's `gpu` resource or "
            "make more devices visible (CUDA_VISIBLE_DEVICES)"
        )
    lock_dir.mkdir(mode=0o777 if shared else 0o700, parents=True, exist_ok=True)
    # unless named to be shared, this user's own folder, writable by nobody else: the default is in the
    # shared /tmp under a name anyone can guess
    st = os.lstat(lock_dir)
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise UnsafeLockFile(
            f"{lock_dir} (the GPU lock folder) is not a folder but a link or a file; remove it, or set "
            f"{LOCK_DIR_ENV} to a folder of your own, and run again"
        )
    if not shared and (st.st_uid != os.getuid() or st.st_mode & 0o022):
        raise UnsafeLockFile(
            f"{lock_dir} (the GPU lock folder) belongs to user id {st.st_uid} or is writable by others; set "
            f"{LOCK_DIR_ENV} to a folder of your own (or one your group shares on purpose) and run again"
        )
    start = last_note = time.monotonic()
    while True:
        got: list[tuple[str, int]] = []
        for d in devices:
            # never through a link: the default folder is in the shared /tmp
            fd = open_lock_file(lock_dir / f"gpu-{re.sub(r'[^A-Za-z0-9._-]', '_', d)}.lock")
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as e:
                os.close(fd)
                if e.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                    continue
                raise
            # who holds it, for people looking at the folder (the lock itself is what counts)
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"pid {os.getpid()} since {time.strftime('%Y-%m-%dT%H:%M:%S')}\n".encode(), 0)
            got.append((d, fd))
            if len(got) == n:
                return Claim([g for g, _ in got], lock_dir, [f for _, f in got])
        Claim([], lock_dir, [f for _, f in got]).release()  # not enough this pass: hold nothing while waiting
        now = time.monotonic()
        if timeout is not None and now - start >= timeout:
            raise GpuPoolError(f"no {n} free GPU(s) among {devices} after {timeout:.0f} s (locks in {lock_dir})")
        if now - last_note >= 60:
            log.info("still waiting for %d free GPU(s) among %s (locks in %s)", n, devices, lock_dir)
            last_note = now
        time.sleep(poll)


_HELD: list[Claim] = []


def claim_for_job(n: int, env: dict | None = None) -> list[str]:
    """Claim ``n`` devices for the rest of this process and narrow ``CUDA_VISIBLE_DEVICES`` to them
    (call before CUDA starts); [] when no device is visible."""
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
    # the default folder is private; one named by OODCORR_GPU_LOCK_DIR may be shared on purpose
    c = claim_devices(n, devices=devices, lock_dir=default_lock_dir(env), shared=bool(env.get(LOCK_DIR_ENV)))
    _HELD.append(c)  # keep the locks open until the process exits
    if env.get("CUDA_VISIBLE_DEVICES") is None:
        env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"  # nvidia-smi's numbering
    env["CUDA_VISIBLE_DEVICES"] = ",".join(c.devices)
    log.info("claimed GPU %s of %s (locks in %s)", ",".join(c.devices), ",".join(devices), c.lock_dir)
    return c.devices
