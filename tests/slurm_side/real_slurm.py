"""A throw-away single-node Debian Slurm (bench/slurm/setup.sh) on free ports in a temp dir,
and its client commands, for the side-by-side tests: the same script is run on it and on
gpuyard, and what each shows a user is compared."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

BENCH_SLURM = Path(__file__).resolve().parents[2] / "bench" / "slurm"
_SBIN = ("/usr/local/sbin", "/usr/sbin", "/sbin")
_ENDED = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED",
                    "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"})  # fmt: skip
# Schedule a job the moment it is submitted (Slurm's default batches them), keep ended jobs
# for squeue/scontrol, and record each ended job's state and exit code where `sacct -c`
# reads them: the throw-away cluster has no slurmdbd, so sacct has no steps here.
_FAST_CONF = "SchedulerParameters=defer_batch=0\nMinJobAge=600\nKillWait=2\n"


def path_with_sbin() -> str:
    parts = os.environ.get("PATH", os.defpath).split(os.pathsep)
    return os.pathsep.join([*parts, *(p for p in _SBIN if p not in parts)])


def slurm_installed() -> bool:
    path = path_with_sbin()
    return all(shutil.which(b, path=path) for b in ("slurmctld", "slurmd", "sbatch", "sacct"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RealSlurm:
    """Slurm's own client commands against the cluster of `conf`."""

    def __init__(self, conf: Path) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_"))}
        self.env = {**env, "PATH": path_with_sbin(), "SLURM_CONF": str(conf)}

    def run(self, *argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(argv), capture_output=True, text=True, env=self.env,
                              cwd=cwd, timeout=60, check=False)  # fmt: skip

    def sbatch(self, *args: str, cwd: Path) -> str:
        result = self.run("sbatch", "--parsable", *args, cwd=cwd)
        assert result.returncode == 0, result.stderr
        return result.stdout.strip().split(";")[0]

    def field(self, job_id: str, key: str) -> str:
        record = self.run("scontrol", "show", "job", "-o", job_id).stdout
        for item in record.split():
            if item.startswith(f"{key}="):
                return item.split("=", 1)[1]
        return ""

    def wait_ended(self, job_id: str, timeout_s: float = 60) -> str:
        """The job's state once it has ended (every task, for an array)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            out = self.run("squeue", "-h", "-t", "all", "-j", job_id, "-o", "%T").stdout
            states = out.split()
            if states and all(s in _ENDED for s in states):
                return states[0]
            time.sleep(0.1)
        raise AssertionError(f"Slurm job {job_id} did not end in {timeout_s} s")


@contextlib.contextmanager
def throwaway_slurm(workdir: Path) -> Iterator[RealSlurm]:
    """Start the cluster in `workdir` (installing slurm-wlm if missing), yield it, stop it."""
    env = {**os.environ, "PATH": path_with_sbin(), "GPUYARD_SLURMCTLD_PORT": str(_free_port()),
           "GPUYARD_SLURMD_PORT": str(_free_port()),
           "GPUYARD_SLURM_EXTRA_CONF": _FAST_CONF + "JobCompType=jobcomp/filetxt\n"
           f"JobCompLoc={workdir / 'jobcomp.log'}\n"}  # fmt: skip
    try:
        started = subprocess.run(["bash", str(BENCH_SLURM / "setup.sh"), str(workdir)],
                                 capture_output=True, text=True, env=env, check=False)  # fmt: skip
        if started.returncode != 0:
            raise RuntimeError(f"bench/slurm/setup.sh failed: {started.stderr[-2000:]}")
        yield RealSlurm(workdir / "slurm.conf")
    finally:
        subprocess.run(["bash", str(BENCH_SLURM / "teardown.sh"), str(workdir)],
                       capture_output=True, env=env, check=False)  # fmt: skip
