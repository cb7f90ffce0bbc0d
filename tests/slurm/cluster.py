"""A throwaway single-node SLURM cluster on 127.0.0.1, for tests. Needs root.

What it does:

* installs Debian's ``slurm-wlm`` and ``munge`` with apt-get when they are missing
  (with a temporary ``policy-rc.d`` so the packages' own services do not start);
* writes a private munge key and ``/etc/slurm/slurm.conf`` + ``gres.conf`` (the
  conf must sit there: the executor plugin's job step strips every ``SLURM_*``
  variable, ``SLURM_CONF`` included, so ``srun`` inside a job only finds the
  default path). An existing slurm.conf not written here is never replaced;
* starts munged, slurmctld and slurmd in the foreground as child processes
  (proctrack/linuxproc, task/none, no accounting, a fake ``gpu`` GRES backed by
  ``/dev/null``) and waits until the node is idle;
* on stop, terminates exactly those processes, by PID, and removes the conf files.

Use it from Python (``with Cluster(workdir) as c: ...``) or from the shell:

    python tests/slurm/cluster.py -- sinfo        # start, run a command, stop
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "squeue", "srun", "scontrol", "sinfo", "scancel")
CONF_DIR = Path("/etc/slurm")
MARKER = "# written by oodcorr tests/slurm/cluster.py"
LOCK = Path("/run/lock/oodcorr-slurm-test.lock")
PARTITION = "oodtest"
CPU_PARTITION = "oodcpu"  # a second partition on the same node: where a config sends its CPU-only jobs
NODE = "oodnode"


class Unavailable(RuntimeError):
    """This machine cannot host the test cluster (not root, no apt); the message says why."""


def _missing() -> list[str]:
    return [b for b in DAEMONS + CLIENTS if shutil.which(b) is None and not Path("/usr/sbin", b).exists()]


def _which(b: str) -> str:
    return shutil.which(b) or str(Path("/usr/sbin", b))


def job_records(text: str) -> dict[str, dict[str, str]]:
    """{job id: its fields} from jobcomp/filetxt's records (``JobId=8 UserId=root(0) ... ExitCode=0:0``).

    A job requeued and finished again has several records; the last one is its end.
    """
    out = {}
    for line in text.splitlines():
        fields = dict(re.findall(r"(\w+)=(\S*)", line))
        if "JobId" in fields:
            out[fields["JobId"]] = fields
    return out


def ensure_installed(log=print) -> None:
    """Install slurm-wlm and munge with apt-get if any daemon or client is missing."""
    if os.geteuid() != 0:
        raise Unavailable("the SLURM test cluster needs root (it runs slurmctld/slurmd and writes /etc/slurm)")
    missing = _missing()
    if not missing:
        return
    if shutil.which("apt-get") is None:
        raise Unavailable(f"{', '.join(missing)} missing and there is no apt-get to install slurm-wlm and munge")
    log(f"installing slurm-wlm and munge with apt-get (missing: {', '.join(missing)})")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    # keep the packages' own services from starting: this script starts its own daemons
    policy = Path("/usr/sbin/policy-rc.d")
    own_policy = not policy.exists()
    if own_policy:
        policy.write_text("#!/bin/sh\n# temporary, oodcorr tests/slurm\nexit 101\n")
        policy.chmod(0o755)
    try:
        upd = subprocess.run(["apt-get", "update"], env=env, capture_output=True, text=True)
        inst = subprocess.run(
            ["apt-get", "install", "-y", "--no-install-recommends", "slurm-wlm", "munge"],
            env=env,
            capture_output=True,
            text=True,
        )
    finally:
        if own_policy:
            policy.unlink()
    if inst.returncode != 0:
        cand = subprocess.run(["apt-cache", "policy", "slurm-wlm"], capture_output=True, text=True).stdout
        if "Candidate: (none)" in cand or not cand.strip():
            raise Unavailable(
                "apt cannot reach a mirror with slurm-wlm: " + (upd.stderr.strip() or inst.stderr.strip())[-500:]
            )
        raise RuntimeError(f"apt-get install slurm-wlm munge failed:\n{inst.stdout[-2000:]}\n{inst.stderr[-2000:]}")
    still = _missing()
    if still:
        raise RuntimeError(f"after installing slurm-wlm and munge, still missing: {still}")


class Cluster:
    """munged + slurmctld + slurmd for one node, state under ``root``."""

    def __init__(
        self,
        root: str | Path,
        cpus: int = 16,
        mem_mb: int = 64000,
        gpus: int = 2,
        ports: tuple[int, int] = (16817, 16818),
        log=print,
    ):
        self.root = Path(root).resolve()
        self.cpus, self.mem_mb, self.gpus, self.ports = cpus, mem_mb, gpus, ports
        self.log = log
        self.procs: dict[str, subprocess.Popen] = {}
        self.argv: dict[str, list[str]] = {}
        self.lock_fh = None
        self.startup_s: float | None = None
        self.host = socket.gethostname().split(".")[0]

    # ---- paths ----------------------------------------------------------------------
    @property
    def munge_socket(self) -> Path:
        return self.root / "munge-run" / "munge.socket.2"

    @property
    def ctld_log(self) -> Path:
        return self.root / "slurm" / "slurmctld.log"

    @property
    def slurmd_log(self) -> Path:
        return self.root / "slurm" / "slurmd.log"

    @property
    def jobcomp_log(self) -> Path:
        """slurmctld's job completion records (jobcomp/filetxt): one line per finished job."""
        return self.root / "slurm" / "jobcomp.txt"

    # ---- configuration ----------------------------------------------------------------
    def _write_conf(self) -> None:
        s = self.root / "slurm"
        for d in (s / "state", s / "spool"):
            d.mkdir(parents=True, exist_ok=True)
        conf = CONF_DIR / "slurm.conf"
        for f in (conf, CONF_DIR / "gres.conf"):
            if f.exists() and MARKER not in f.read_text(errors="replace"):
                raise Unavailable(
                    f"{f} exists and was not written by this test: refusing to replace "
                    "the configuration of a real SLURM installation"
                )
        CONF_DIR.mkdir(parents=True, exist_ok=True)
        conf.write_text(
            "\n".join(
                [
                    MARKER,
                    "ClusterName=oodcorrtest",
                    f"SlurmctldHost={self.host}(127.0.0.1)",
                    f"SlurmctldPort={self.ports[0]}",
                    f"SlurmdPort={self.ports[1]}",
                    "AuthType=auth/munge",
                    "CredType=cred/munge",
                    f"AuthInfo=socket={self.munge_socket}",
                    "SlurmUser=root",
                    "SlurmdUser=root",
                    f"StateSaveLocation={s / 'state'}",
                    f"SlurmdSpoolDir={s / 'spool'}",
                    f"SlurmctldPidFile={s / 'slurmctld.pid'}",
                    f"SlurmdPidFile={s / 'slurmd.pid'}",
                    f"SlurmctldLogFile={self.ctld_log}",
                    f"SlurmdLogFile={self.slurmd_log}",
                    "SlurmctldDebug=info",
                    "SlurmdDebug=info",
                    "ProctrackType=proctrack/linuxproc",
                    "TaskPlugin=task/none",
                    "MpiDefault=none",
                    "SchedulerType=sched/backfill",
                    "SelectType=select/cons_tres",
                    "SelectTypeParameters=CR_Core_Memory",
                    "GresTypes=gpu",
                    "AccountingStorageType=accounting_storage/none",
                    "JobAcctGatherType=jobacct_gather/none",
                    # one key=value record per finished job, whichever scheduler started it
                    # (the test reads these, not the log lines of one scheduling path)
                    "JobCompType=jobcomp/filetxt",
                    f"JobCompLoc={self.jobcomp_log}",
                    # finished jobs stay visible to squeue this long (the executor's status check needs it)
                    "MinJobAge=600",
                    "DefMemPerCPU=500",
                    "ReturnToService=2",
                    "SlurmdParameters=config_overrides",
                    "SchedulerParameters=sched_interval=1",
                    f"NodeName={NODE} NodeHostname={self.host} NodeAddr=127.0.0.1 CPUs={self.cpus} "
                    f"RealMemory={self.mem_mb} Gres=gpu:{self.gpus} State=UNKNOWN",
                    f"PartitionName={PARTITION} Nodes={NODE} Default=YES MaxTime=INFINITE State=UP",
                    f"PartitionName={CPU_PARTITION} Nodes={NODE} MaxTime=INFINITE State=UP",
                    "",
                ]
            )
        )
        # fake GPUs: one file per device, which only has to exist (/dev/null for a single one)
        if self.gpus == 1:
            files = "/dev/null"
        else:
            for i in range(self.gpus):
                (s / f"fakegpu{i}").touch()
            files = f"{s}/fakegpu[0-{self.gpus - 1}]"
        (CONF_DIR / "gres.conf").write_text(f"{MARKER}\nNodeName={NODE} Name=gpu File={files}\n")

    def _write_munge(self) -> list[str]:
        m = self.root / "munge"
        run = self.munge_socket.parent
        m.mkdir(parents=True, exist_ok=True)
        run.mkdir(parents=True, exist_ok=True)
        os.chmod(m, 0o700)
        os.chmod(run, 0o755)  # munged refuses a socket folder with other modes
        key = m / "munge.key"
        if not key.exists():
            key.write_bytes(os.urandom(1024))
        os.chmod(key, 0o600)
        return [
            _which("munged"),
            "--foreground",
            f"--key-file={key}",
            f"--socket={self.munge_socket}",
            f"--pid-file={m / 'munged.pid'}",
            f"--log-file={m / 'munged.log'}",
            f"--seed-file={m / 'munged.seed'}",
            "--force",
        ]

    # ---- lifecycle --------------------------------------------------------------------
    def _spawn(self, name: str, argv: list[str]) -> None:
        self.argv[name] = argv
        out = open(self.root / f"{name}.out", "ab")
        self.procs[name] = subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
        )
        self.log(f"started {name} (pid {self.procs[name].pid})")

    def _wait(self, what: str, ok, timeout: float) -> None:
        end = time.time() + timeout
        while time.time() < end:
            for name, p in self.procs.items():
                if p.poll() is not None:
                    raise RuntimeError(
                        f"{name} exited with {p.returncode} while waiting for {what}; "
                        f"see {self.root / (name + '.out')}\n{self.tail(name)}"
                    )
            if ok():
                return
            time.sleep(0.1)
        raise RuntimeError(
            f"timed out after {timeout:.0f} s waiting for {what}\n" + "\n".join(self.tail(n) for n in self.procs)
        )

    def tail(self, name: str, n: int = 3000) -> str:
        logs = {"slurmctld": self.ctld_log, "slurmd": self.slurmd_log, "munged": self.root / "munge" / "munged.log"}
        text = ""
        for f in (self.root / f"{name}.out", logs.get(name)):
            if f and f.exists():
                text += f"--- {f}\n" + f.read_text(errors="replace")[-n:]
        return text

    def node_state(self) -> str:
        r = subprocess.run(["sinfo", "-h", "-n", NODE, "-o", "%T"], capture_output=True, text=True)
        return r.stdout.strip() if r.returncode == 0 else ""

    def start(self, timeout: float = 90) -> float:
        """Start the daemons; return the seconds until the node was idle."""
        self.root.mkdir(parents=True, exist_ok=True)
        LOCK.parent.mkdir(parents=True, exist_ok=True)
        self.lock_fh = open(LOCK, "w")
        fcntl.flock(self.lock_fh, fcntl.LOCK_EX)  # one test cluster per machine at a time
        t0 = time.time()
        try:
            self._write_conf()
            self._spawn("munged", self._write_munge())
            self._wait("the munge socket", self.munge_socket.exists, 30)
            self._spawn("slurmctld", [_which("slurmctld"), "-D", "-i"])
            self._wait(
                "slurmctld",
                lambda: subprocess.run(["scontrol", "ping"], capture_output=True, text=True).stdout.count("UP") > 0,
                timeout,
            )
            self._spawn("slurmd", [_which("slurmd"), "-D", "-N", NODE])
            self._wait(f"node {NODE} idle", lambda: self.node_state() == "idle", timeout)
        except BaseException:
            self.stop()
            raise
        self.startup_s = time.time() - t0
        self.log(f"cluster idle after {self.startup_s:.1f} s")
        return self.startup_s

    def controller_up(self) -> bool:
        return subprocess.run(["scontrol", "ping"], capture_output=True, text=True).stdout.count("UP") > 0

    def stop_controller(self) -> None:
        """Stop slurmctld (by PID), as an administrator's restart would: the jobs run on under slurmd.

        SIGTERM, not SIGKILL: slurmctld writes its state (StateSaveLocation) as it stops. Killed outright, it
        may have saved a job that had started as still launching; started again, it then finds the job on
        the node, fails its launch and holds it (`launch failed requeued held`, CI of 2026-12-03): a fault
        of SLURM's state saving under load, not the controller's absence this cluster exists to test."""
        p = self.procs.pop("slurmctld")
        _terminate(p, grace=60)
        self.log(f"stopped slurmctld (pid {p.pid})")

    def release_held(self) -> list[str]:
        """Release the jobs SLURM holds after a failed launch (what the run tells its user to do); their ids."""
        res = subprocess.run(["squeue", "-h", "-t", "PD", "-o", "%i %r"], capture_output=True, text=True, timeout=60)
        held = [line.split()[0] for line in res.stdout.splitlines() if "held" in line.lower()]
        for job in held:
            subprocess.run(["scontrol", "release", job], capture_output=True, timeout=60)
            self.log(f"released held SLURM job {job}")
        return held

    def start_controller(self, timeout: float = 60) -> None:
        """Start slurmctld again with its saved state (StateSaveLocation): the jobs it knew, the node's state."""
        self._spawn("slurmctld", self.argv["slurmctld"])
        self._wait("slurmctld", self.controller_up, timeout)

    def set_node(self, state: str, reason: str = "oodcorr test") -> None:
        """``drain`` (no job starts on the node; SLURM gives pending jobs a reason) or ``resume``."""
        extra = [f"reason={reason}"] if state == "drain" else []
        subprocess.run(["scontrol", "update", f"nodename={NODE}", f"state={state}", *extra], check=True)

    def cancel_all(self) -> None:
        """Cancel every job of this throwaway cluster (a test that failed midway leaves none running)."""
        subprocess.run(["scancel", "--user", str(os.geteuid())], capture_output=True, timeout=60)

    def stop(self) -> None:
        """Terminate the daemons this object started, by PID (slurmd first), and remove the conf."""
        for name in ("slurmd", "slurmctld", "munged"):
            p = self.procs.pop(name, None)
            if p is None or p.poll() is not None:
                continue
            _terminate(p, grace=20)
            self.log(f"stopped {name} (pid {p.pid})")
        for f in (CONF_DIR / "slurm.conf", CONF_DIR / "gres.conf"):
            if f.exists() and MARKER in f.read_text(errors="replace"):
                f.unlink()
        if self.lock_fh is not None:
            self.lock_fh.close()
            self.lock_fh = None

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()


def _terminate(p: subprocess.Popen, grace: float) -> None:
    """SIGTERM (a daemon saves its state as it stops), then SIGKILL after ``grace`` seconds."""
    os.kill(p.pid, signal.SIGTERM)
    try:
        p.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        os.kill(p.pid, signal.SIGKILL)
        p.wait(timeout=20)


def main(argv: list[str]) -> int:
    import tempfile

    cmd = argv[argv.index("--") + 1 :] if "--" in argv else ["sinfo"]
    ensure_installed()
    with tempfile.TemporaryDirectory(prefix="oodcorr-slurm-") as d, Cluster(d) as c:
        print(f"cluster up in {c.startup_s:.1f} s; running {cmd}", flush=True)
        return subprocess.run(cmd).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
