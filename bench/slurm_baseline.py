"""Slurm side-by-side baseline for gpuyard's submit-latency benchmark.

Measures, for Slurm in its default scheduling configuration, the time from
typing the submit command (``sbatch --gres=gpu:1 --wrap "touch FILE"``) to the
job running (the mtime of FILE, written by the job itself).

The cluster is a throw-away single node started by ``bench/slurm/setup.sh``
(Debian's slurm-wlm, 4 fake GPUs in gres.conf, ``AuthType=auth/none``, no
cgroups) and stopped by ``bench/slurm/teardown.sh``.  Needs root.

Standard library only.  Use from Python::

    from pathlib import Path
    from slurm_baseline import slurm_available, slurm_cluster, \
        measure_sbatch_to_running, summarize

    with slurm_cluster(Path("/tmp/gpuyard-slurm")) as env:
        lat = measure_sbatch_to_running(env, 10, Path("/tmp/gpuyard-slurm/jobs"))
    print(summarize(lat))   # {"sbatch_to_running_p50_ms": ..., "..._p99_ms": ..., "n": 10}

or from the command line::

    python3 bench/slurm_baseline.py -n 10 --json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from machine import with_machine

HERE = Path(__file__).resolve().parent
SETUP_SH = HERE / "slurm" / "setup.sh"
TEARDOWN_SH = HERE / "slurm" / "teardown.sh"
DEFAULT_WORKDIR = Path("/tmp/gpuyard-slurm")

# Debian puts the daemons in /usr/sbin, which is not on every user's PATH.
_EXTRA_PATH = ("/usr/local/sbin", "/usr/sbin", "/sbin")
_BINARIES = ("sbatch", "squeue", "scancel", "sinfo", "scontrol", "slurmctld", "slurmd")

# squeue states after which a job will not run (any more).
_TERMINAL_STATES = frozenset(
    {
        "COMPLETED",
        "FAILED",
        "CANCELLED",
        "TIMEOUT",
        "NODE_FAIL",
        "PREEMPTED",
        "OUT_OF_MEMORY",
        "BOOT_FAIL",
        "DEADLINE",
        "SPECIAL_EXIT",
        "REVOKED",
    }
)


class SlurmBaselineError(RuntimeError):
    """Slurm could not be started or a benchmark job did not behave."""


def _search_path(env: Mapping[str, str] | None = None) -> str:
    path = (env or os.environ).get("PATH", os.defpath)
    parts = path.split(os.pathsep)
    parts += [p for p in _EXTRA_PATH if p not in parts]
    return os.pathsep.join(parts)


def slurm_available() -> bool:
    """True when the Slurm daemons and client commands are installed.

    ``bench/slurm/setup.sh`` can install them (``apt-get install slurm-wlm``)
    when they are missing; see :func:`slurm_installable`.
    """
    path = _search_path()
    return all(shutil.which(b, path=path) for b in _BINARIES)


def slurm_installable() -> bool:
    """True when setup.sh could install Slurm here (root with apt-get)."""
    return os.geteuid() == 0 and shutil.which("apt-get", path=_search_path()) is not None


def slurm_env(conf: Path) -> dict[str, str]:
    """Environment for Slurm client commands talking to the cluster of ``conf``.

    Inherited ``SLURM_*``/``SBATCH_*`` variables are dropped: they would change
    what ``sbatch`` does (e.g. when run from inside another Slurm job).
    """
    env = {
        k: v
        for k, v in os.environ.items()
        if not (k.startswith("SLURM_") or k.startswith("SBATCH_") or k.startswith("SQUEUE_"))
    }
    env["PATH"] = _search_path(env)
    env["SLURM_CONF"] = str(conf)
    return env


def _tail(text: str, lines: int = 20) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


@contextlib.contextmanager
def slurm_cluster(workdir: Path = DEFAULT_WORKDIR) -> Iterator[dict[str, str]]:
    """Start the single-node cluster in ``workdir``; yield the env to use; stop it.

    The yielded dict is a full environment (``os.environ`` minus inherited
    Slurm variables, plus ``SLURM_CONF`` and a PATH with /usr/sbin) suitable
    for ``subprocess.run(..., env=env)``.
    """
    workdir = Path(workdir).absolute()
    try:
        proc = subprocess.run(
            ["bash", str(SETUP_SH), str(workdir)],
            capture_output=True,
            text=True,
            env={**os.environ, "PATH": _search_path()},
            check=False,
        )
        if proc.returncode != 0:
            raise SlurmBaselineError(
                f"{SETUP_SH.name} failed (exit {proc.returncode}):\n{_tail(proc.stderr)}"
                f"\nlogs: {workdir / 'log'}"
            )
        conf = workdir / "slurm.conf"
        for line in proc.stdout.splitlines():
            if line.startswith("SLURM_CONF="):
                conf = Path(line.split("=", 1)[1])
        yield slurm_env(conf)
    finally:
        subprocess.run(
            ["bash", str(TEARDOWN_SH), str(workdir)],
            capture_output=True,
            text=True,
            env={**os.environ, "PATH": _search_path()},
            check=False,
        )


def _job_state(env: Mapping[str, str], job_id: str) -> str | None:
    """Current state of ``job_id`` per squeue; None once Slurm has forgotten it."""
    proc = subprocess.run(
        ["squeue", "-h", "-t", "all", "-j", job_id, "-o", "%T"],
        capture_output=True,
        text=True,
        env=dict(env),
        check=False,
    )
    if proc.returncode != 0:
        if "Invalid job id" in proc.stderr:
            return None
        raise SlurmBaselineError(f"squeue failed for job {job_id}: {proc.stderr.strip()}")
    state = proc.stdout.strip().split("\n")[0].strip()
    return state or None


def _cancel(env: Mapping[str, str], job_id: str) -> None:
    subprocess.run(["scancel", job_id], capture_output=True, env=dict(env), check=False)


def measure_sbatch_to_running(
    env: Mapping[str, str],
    n: int,
    out_dir: Path,
    *,
    timeout: float = 60.0,
    poll_interval: float = 0.01,
    gap: float = 0.0,
) -> list[float]:
    """Latency in seconds from ``sbatch`` being started to the job running, n times.

    For each job: ``t0 = time.time()`` just before running
    ``sbatch --parsable --gres=gpu:1 --wrap "touch FILE"``; the job's start is
    FILE's mtime (``st_mtime_ns``), so the polling interval does not affect the
    result.  Jobs run one after another: each must have finished before the
    next is submitted.  Raises :class:`TimeoutError` if a job has not run (or
    not finished) within ``timeout`` seconds, and :class:`SlurmBaselineError`
    if sbatch fails or the job ends without running.

    ``out_dir`` must be on a local file system (the mtime comes from the same
    clock as ``time.time()``).

    ``gap`` seconds of idle time are inserted before each submission (default
    0: submit as soon as the previous job has finished).  Slurm's latency
    depends on it: batch jobs are not scheduled at submit time but by the
    scheduler loop, which by default waits ``batch_sched_delay`` (3 s) after
    its previous pass, so back-to-back jobs see ~3 s and a job submitted to a
    cluster that has been idle for a few seconds is started sooner.
    """
    if n < 1:
        raise ValueError("n must be >= 1")
    out_dir = Path(out_dir).absolute()
    out_dir.mkdir(parents=True, exist_ok=True)
    env = dict(env)
    run_id = uuid.uuid4().hex[:8]
    latencies: list[float] = []

    for i in range(n):
        if gap > 0:
            time.sleep(gap)
        marker = out_dir / f"ran-{run_id}-{i}"
        argv = [
            "sbatch",
            "--parsable",
            "--gres=gpu:1",
            "--job-name=gpuyard-baseline",
            f"--chdir={out_dir}",
            f"--output={out_dir / 'slurm-%j.out'}",
            "--wrap",
            f"touch {marker}",
        ]

        t0 = time.time()
        proc = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
        if proc.returncode != 0:
            raise SlurmBaselineError(
                f"sbatch failed (exit {proc.returncode}): {proc.stderr.strip()}"
            )
        # --parsable prints "jobid" or "jobid;cluster".
        job_id = proc.stdout.strip().split(";")[0]
        deadline = t0 + timeout

        # 1. Wait for the job to run (the marker file to appear).
        next_state_check = time.monotonic() + 0.5
        while True:
            try:
                st = marker.stat()
                break
            except FileNotFoundError:
                pass
            now = time.time()
            if now > deadline:
                state = _job_state(env, job_id)
                _cancel(env, job_id)
                raise TimeoutError(
                    f"Slurm job {job_id} (#{i + 1}/{n}) did not run within {timeout:g} s "
                    f"of sbatch (state: {state or 'unknown'}); job cancelled. "
                    f"See {out_dir / f'slurm-{job_id}.out'} and the slurmctld/slurmd logs."
                )
            if time.monotonic() >= next_state_check:
                # Fail fast if the job ended without touching the file.
                state = _job_state(env, job_id)
                if state in _TERMINAL_STATES:
                    try:
                        st = marker.stat()
                        break
                    except FileNotFoundError:
                        raise SlurmBaselineError(
                            f"Slurm job {job_id} ended in state {state} without running "
                            f"(see {out_dir / f'slurm-{job_id}.out'})"
                        ) from None
                next_state_check = time.monotonic() + 0.5
            time.sleep(poll_interval)
        latencies.append(st.st_mtime_ns / 1e9 - t0)

        # 2. Wait for the job to finish before submitting the next one.
        while True:
            state = _job_state(env, job_id)
            if state is None or state in _TERMINAL_STATES:
                break
            if time.time() > deadline:
                _cancel(env, job_id)
                raise TimeoutError(
                    f"Slurm job {job_id} (#{i + 1}/{n}) ran but did not finish within "
                    f"{timeout:g} s of sbatch (state: {state}); job cancelled."
                )
            time.sleep(0.05)
        if state not in (None, "COMPLETED"):
            raise SlurmBaselineError(f"Slurm job {job_id} ended in state {state}")

    return latencies


def percentile(values: Sequence[float], q: float) -> float:
    """q-th percentile (0..100) with linear interpolation between closest ranks."""
    if not values:
        raise ValueError("no values")
    s = sorted(values)
    pos = (len(s) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def summarize(latencies: Sequence[float]) -> dict[str, float | int]:
    """The JSON record: p50/p99 in milliseconds and n."""
    return {
        "sbatch_to_running_p50_ms": round(percentile(latencies, 50) * 1000.0, 3),
        "sbatch_to_running_p99_ms": round(percentile(latencies, 99) * 1000.0, 3),
        "n": len(latencies),
    }


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description="Slurm baseline: time from `sbatch --gres=gpu:1` to the job running."
    )
    ap.add_argument("-n", type=int, default=10, help="number of jobs to time (default 10)")
    ap.add_argument("--json", action="store_true", help="print one JSON line")
    ap.add_argument(
        "--workdir",
        type=Path,
        default=DEFAULT_WORKDIR,
        help=f"cluster directory for conf/state/logs (default {DEFAULT_WORKDIR})",
    )
    ap.add_argument(
        "--out-dir", type=Path, default=None, help="where jobs write (default WORKDIR/jobs)"
    )
    ap.add_argument("--timeout", type=float, default=60.0, help="per-job timeout, s (default 60)")
    ap.add_argument(
        "--warmup",
        type=int,
        default=0,
        help="untimed jobs to run first (default 0: the first job counts)",
    )
    ap.add_argument(
        "--gap",
        type=float,
        default=0.0,
        help="idle seconds before each submission (default 0: back to back)",
    )
    args = ap.parse_args(argv)
    if args.n < 1:
        ap.error("-n must be >= 1")

    if not slurm_available() and not slurm_installable():
        print(
            "slurm_baseline: Slurm is not installed and cannot be installed here "
            "(needs root and apt-get)",
            file=sys.stderr,
        )
        return 2
    if os.geteuid() != 0:
        print("slurm_baseline: must run as root (slurmd, SlurmUser=root)", file=sys.stderr)
        return 2

    out_dir = args.out_dir or (args.workdir / "jobs")
    try:
        with slurm_cluster(args.workdir) as env:
            if args.warmup > 0:
                measure_sbatch_to_running(
                    env, args.warmup, out_dir, timeout=args.timeout, gap=args.gap
                )
            lat = measure_sbatch_to_running(
                env, args.n, out_dir, timeout=args.timeout, gap=args.gap
            )
    except (SlurmBaselineError, TimeoutError) as exc:
        print(f"slurm_baseline: {exc}", file=sys.stderr)
        return 1

    summary = summarize(lat)
    if args.json:
        print(json.dumps(with_machine(summary, backend="slurm")))
    else:
        print(f"sbatch -> running, n={summary['n']}")
        print(f"  p50 {summary['sbatch_to_running_p50_ms']:.1f} ms")
        print(f"  p99 {summary['sbatch_to_running_p99_ms']:.1f} ms")
        print("  all: " + ", ".join(f"{x * 1000:.0f}" for x in lat) + " ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
