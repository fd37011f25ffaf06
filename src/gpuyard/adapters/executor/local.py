"""LocalExecutor: each job runs under its own supervisor process on this machine.

The server watches supervisors with pidfds (they work for processes that are not its
children, so also after a restart) and reads the exit status each supervisor writes.
"""

from __future__ import annotations

import json
import logging
import os
import py_compile
import selectors
import signal
import subprocess
import sys
import threading
from pathlib import Path

import psutil

from gpuyard.domain.job import Job
from gpuyard.services.ports import ExitCallback, ExitStatus, Launched, Recovered

log = logging.getLogger("gpuyard.executor")
SUPERVISOR = str(Path(__file__).with_name("supervisor.py"))
_START_TIME_TOLERANCE_S = 0.05


class LocalExecutor:
    """Implements the Executor port with local supervised process trees."""

    def __init__(self, jobs_dir: Path, on_exit: ExitCallback, *, grace_s: float = 10.0) -> None:
        self._jobs_dir = jobs_dir
        self._jobs_dir.mkdir(parents=True, exist_ok=True)
        self._supervisor = _compile_supervisor(jobs_dir / ".supervisor.pyc")
        self._on_exit = on_exit
        self._grace_s = grace_s
        self._children: dict[int, subprocess.Popen[bytes]] = {}
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = os.pipe()
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._pending_watch: list[tuple[int, int]] = []
        self._lock = threading.Lock()
        self._closed = False
        self._thread = threading.Thread(target=self._watch_loop, name="gpuyard-watch", daemon=True)
        self._thread.start()

    def job_dir(self, job_id: int) -> Path:
        return self._jobs_dir / str(job_id)

    def log_path(self, job_id: int) -> str:
        return str(self.job_dir(job_id) / "output.log")

    # -- start / stop ---------------------------------------------------------------------
    def launch(self, job: Job, argv: list[str], env: dict[str, str]) -> Launched:
        jobdir = self.job_dir(job.id)
        jobdir.mkdir(parents=True, exist_ok=True)
        for stale in ("status.json", "supervisor.pid"):  # an earlier run's (preempted, requeued)
            (jobdir / stale).unlink(missing_ok=True)
        limit = job.spec.time_limit_s or 0
        command = [sys.executable, "-I", "-S", self._supervisor, str(jobdir), str(self._grace_s),
                   str(limit), job.spec.workdir, "--", *argv]  # fmt: skip
        with open(self.log_path(job.id), "ab") as logf:
            proc = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=logf,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
                close_fds=True,
            )
        self._children[job.id] = proc
        return Launched(proc.pid, _start_time(proc.pid) or 0.0)

    def stop(self, job: Job) -> None:
        if job.pid is None or not self._is_ours(job.pid, job.pid_started_at, job.id):
            return
        try:
            os.kill(job.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass

    # -- restart --------------------------------------------------------------------------
    def recover(self, job: Job) -> Recovered:
        status = self._read_status(job.id)
        if status is not None:
            return Recovered(ended=status)
        pid = job.pid or self._read_pid(job.id)
        if pid is None:
            return Recovered(never_started=True)
        started_at = job.pid_started_at if job.pid == pid else None
        if self._is_ours(pid, started_at, job.id):
            return Recovered(alive=Launched(pid, _start_time(pid) or 0.0))
        # Gone: it may have written its status between our two looks.
        return Recovered(ended=self._read_status(job.id) or ExitStatus(None, lost=True))

    def _is_ours(self, pid: int, started_at: float | None, job_id: int) -> bool:
        """Same pid, same start time (or, unknown start time, our supervisor's command line)."""
        try:
            proc = psutil.Process(pid)
            if proc.status() == psutil.STATUS_ZOMBIE:
                return False
            if started_at:
                return bool(abs(proc.create_time() - started_at) < _START_TIME_TOLERANCE_S)
            return str(self.job_dir(job_id)) in proc.cmdline()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            return False

    # -- watching -------------------------------------------------------------------------
    def watch(self, job: Job) -> None:
        assert job.pid is not None
        try:
            pidfd = os.pidfd_open(job.pid)
        except ProcessLookupError:
            self._report(job.id)
            return
        with self._lock:
            self._pending_watch.append((pidfd, job.id))
        os.write(self._wake_w, b"x")

    def _watch_loop(self) -> None:
        while not self._closed:
            for key, _ in self._selector.select(timeout=1.0):
                if key.data is None:
                    os.read(self._wake_r, 4096)
                    with self._lock:
                        added, self._pending_watch = self._pending_watch, []
                    for pidfd, job_id in added:
                        self._selector.register(pidfd, selectors.EVENT_READ, job_id)
                    continue
                self._selector.unregister(key.fileobj)
                os.close(key.fd)
                self._report(key.data)

    def _report(self, job_id: int) -> None:
        proc = self._children.pop(job_id, None)
        if proc is not None:
            proc.wait()  # reap our own child so no zombie is left
        status = self._read_status(job_id) or ExitStatus(None, lost=True)
        try:
            self._on_exit(job_id, status)
        except Exception:
            log.exception("recording the end of job %s failed", job_id)

    def _read_status(self, job_id: int) -> ExitStatus | None:
        try:
            data = json.loads((self.job_dir(job_id) / "status.json").read_text())
        except (FileNotFoundError, ValueError):
            return None
        return ExitStatus(
            exit_code=data["exit_code"],
            signal=data["signal"],
            timed_out=bool(data["timed_out"]),
            ended_at=data["ended_at"],
            stop_requested=bool(data.get("stop_requested", False)),
        )

    def _read_pid(self, job_id: int) -> int | None:
        try:
            return int((self.job_dir(job_id) / "supervisor.pid").read_text())
        except (FileNotFoundError, ValueError):
            return None

    def close(self) -> None:
        self._closed = True
        os.write(self._wake_w, b"x")
        self._thread.join(timeout=5)


def _compile_supervisor(target: Path) -> str:
    """The supervisor as bytecode: saves compiling it at every job start (~2 ms)."""
    try:
        py_compile.compile(SUPERVISOR, cfile=str(target), doraise=True)
        return str(target)
    except (OSError, py_compile.PyCompileError):
        return SUPERVISOR


def _start_time(pid: int) -> float | None:
    try:
        return float(psutil.Process(pid).create_time())
    except psutil.NoSuchProcess:
        return None
