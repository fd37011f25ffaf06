"""The per-node side of a gang: one `NodeRunner` Ray actor per placement-group bundle.

It runs inside a Ray worker on its node, holding the bundle's GPUs and CPUs (so Ray has set
CUDA_VISIBLE_DEVICES to exactly the GPUs it gave this bundle). It starts the node's command
under the same supervisor as a local job (`adapters/executor/supervisor.py`, in node mode:
one process-tree stop path, the same time limit and status file) and hands the output back to
the server by long polling:

- `poll(wait_s)` returns the lines produced since the last call (waiting up to `wait_s` for at
  least one) and, once the command has ended and its output is drained, its exit code and why
  the supervisor stopped it. Polling rather than a streaming generator: one plain call per
  batch, no generator back-pressure settings, and a dead node surfaces as the call's
  `ActorDiedError` like any other call.
- The output buffer is bounded (`_MAX_BUFFERED`): when the server falls behind, the reader stops
  reading and the job blocks on its stdout instead of the actor growing without limit.

The supervisor's node mode: its launch file (in a folder of its own on this node) says to
detach first (a Ray worker SIGKILLs its direct children when it exits), to stop the job when
its stdin, a pipe only this actor holds, reaches EOF (the actor is gone, however it died) or
when the node's raylet exits (a pidfd: a worker whose raylet died can linger long before it
notices), and to report `pid N` and `exit CODE CAUSE` on a pipe to this actor. If the
supervisor dies without its last word (its job killed it), the actor finds the job's processes
(`adapters/executor/tree.py`) and ends them itself.

The actor is a threaded actor (`max_concurrency`): `stop` must run while a `poll` is waiting.

Every node needs gpuyard (same version) installed in the Python its raylet starts workers with:
Ray imports this class by reference, and the supervisor's path comes from this package.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

_MAX_BUFFERED = 8 << 20  # bytes of output held for the server before the job is throttled
_MAX_LINE = 64 << 10  # a longer "line" (no newline) is handed back in pieces
_BATCH_BYTES = 1 << 20  # at most this much per poll
# The node's own environment reaches the job (PATH, HOME, ...), but not Ray's (the cluster
# token's path, the worker's job id, ...) nor a gpuyard server's settings.
_NOT_INHERITED = ("RAY_", "GPUYARD_")
# The supervisor's own environment: none of the node's or the job's (see supervisor.py).
_SUPERVISOR_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin"}
_STOP_MARGIN_S = 5.0  # past grace + this, a supervisor that has not ended is killed


def node_environment(base: dict[str, str], job_env: dict[str, str]) -> dict[str, str]:
    """The command's environment: this node's, less Ray's and gpuyard's, then the job's."""
    env = {k: v for k, v in base.items() if not k.startswith(_NOT_INHERITED)}
    env.update(job_env)
    return env


class NodeRunner:
    """Runs one node's command of a gang job. Decorated with `ray.remote` by `gang.py`."""

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._lines: deque[bytes] = deque()
        self._buffered = 0
        self._output_done = False
        self._status_done = False
        self._exit_code: int | None = None
        self._cause = "-"  # the supervisor's: "-", "timeout", "raylet", "actor"; "lost"
        self._pid = 0  # the supervisor's
        self._pidfd = -1  # the supervisor's, so a signal never reaches a reused pid
        self._control_w = -1  # held open for the supervisor's life: EOF tells it we are gone
        self._jobdir: Path | None = None
        self._marker = ""
        self._since = 0.0
        self._grace_s = 10.0
        self._stop_signal: int = signal.SIGTERM
        self._started = False

    def info(self) -> dict[str, Any]:
        """Where this bundle landed and what Ray gave it."""
        import ray

        return {
            "node_id": ray.get_runtime_context().get_node_id(),
            "ip": ray.util.get_node_ip_address(),
            "hostname": socket.gethostname(),
            "gpu_ids": [str(i) for i in ray.get_gpu_ids()],
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
            "pid": os.getpid(),
        }

    def free_port(self) -> int:
        """A TCP port free on this node right now (bind to port 0, then release it)."""
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("", 0))
            return int(sock.getsockname()[1])

    def start(
        self,
        argv: list[str],
        env: dict[str, str],
        grace_s: float,
        workdir: str | None,
        time_limit_s: float | None = None,
        stop_signal: int = signal.SIGTERM,
        warn: tuple[int, int] = (0, 0),
    ) -> int:
        """Start the command under a (detached) supervisor; returns the supervisor's pid.
        `warn`: (signal, seconds) before the time limit (`--signal SIG@SECONDS`); (0, 0): none."""
        from gpuyard.adapters.executor import launch_file as lf
        from gpuyard.adapters.executor.srun_shim import (
            SRUN_WANTED,
            install_srun,
            with_srun,
        )

        assert not self._started, "a NodeRunner runs one command"
        self._started = True
        self._grace_s, self._stop_signal = grace_s, stop_signal
        child_env = node_environment(dict(os.environ), env)
        # Ray's GPUs for this bundle, whatever the job's env said.
        child_env["CUDA_VISIBLE_DEVICES"] = os.environ.get("CUDA_VISIBLE_DEVICES", "")
        self._jobdir = Path(tempfile.mkdtemp(prefix="gpuyard-node-"))
        if child_env.pop(SRUN_WANTED, None) == "1":
            child_env = with_srun(child_env, install_srun(self._jobdir / "bin"))
        plan = lf.NodePlan(
            argv, child_env, workdir or os.getcwd(), time_limit_s, stop_signal, *warn
        )
        self._marker = lf.new_marker()
        control_r, self._control_w = os.pipe()  # all four ends close-on-exec
        status_r, status_w = os.pipe()
        node_mode: dict[str, Any] = {
            "watch_fd": 0,
            "watch_pid": int(os.environ.get("RAY_RAYLET_PID", "0") or 0),
            "report_fd": status_w,
            "detach": True,
        }
        lf.write_launch_file(
            self._jobdir, lf.launch_instructions(plan, self._jobdir, grace_s, self._marker,
                                                 **node_mode)
        )  # fmt: skip
        self._since = time.time()
        try:
            launcher = subprocess.Popen(
                [sys.executable, "-I", "-S", lf.SUPERVISOR, str(self._jobdir)],
                stdin=control_r,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env=_SUPERVISOR_ENV,
                start_new_session=True,
                pass_fds=(status_w,),
            )
        finally:
            os.close(control_r)
            os.close(status_w)
        launcher.wait()  # the first supervisor process exits once the real one has detached
        assert launcher.stdout is not None
        status = os.fdopen(status_r, "rb", buffering=0)
        first = _read_line(status)
        if not first.startswith(b"pid "):
            status.close()
            raise RuntimeError(f"the node's supervisor did not start: {first!r}")
        self._pid = int(first.split()[1])
        try:
            self._pidfd = os.pidfd_open(self._pid)
        except OSError:
            self._pidfd = -1
        # The streams themselves (not their fd numbers): they must stay referenced, or GC
        # closes them.
        threading.Thread(target=self._read, args=(launcher.stdout,), daemon=True).start()
        threading.Thread(target=self._read_status, args=(status,), daemon=True).start()
        return self._pid

    def _read(self, output: Any) -> None:
        fd = output.fileno()
        pending = b""
        while True:
            with self._lock:
                while self._buffered > _MAX_BUFFERED:
                    self._lock.wait()
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                chunk = b""
            if not chunk:
                break
            pending += chunk
            lines = pending.split(b"\n")
            pending = lines.pop()
            while len(pending) > _MAX_LINE:
                lines.append(pending[:_MAX_LINE])
                pending = pending[_MAX_LINE:]
            if lines:
                self._push(lines)
        if pending:
            self._push([pending])
        output.close()
        with self._lock:
            self._output_done = True
            self._lock.notify_all()

    def _read_status(self, status: Any) -> None:
        """The supervisor's last word; if it dies without one (its job killed it), the job's
        processes are ended here, so the output reaches its end too."""
        code, cause = -signal.SIGKILL, "lost"
        for line in iter(lambda: _read_line(status), b""):
            if line.startswith(b"exit "):
                _, word, *why = line.split()
                code, cause = int(word), (why[0].decode() if why else "-")
        status.close()
        if cause == "lost":
            from gpuyard.adapters.executor import tree

            found = tree.find_job_processes(self._pid, self._marker, self._since, os.getuid())
            tree.end_processes(found, self._stop_signal, self._grace_s)
        if self._jobdir is not None:
            shutil.rmtree(self._jobdir, ignore_errors=True)
        with self._lock:
            self._exit_code, self._cause = code, cause
            self._status_done = True
            self._lock.notify_all()

    def _done(self) -> bool:
        return self._output_done and self._status_done

    def _push(self, lines: list[bytes]) -> None:
        with self._lock:
            self._lines.extend(lines)
            self._buffered += sum(len(line) for line in lines)
            self._lock.notify_all()

    def poll(self, wait_s: float) -> tuple[list[bytes], int | None, str]:
        """(new output lines, the exit code once the command ended and all output was read,
        why its supervisor stopped it: "-" (it ended, or was asked to stop), "timeout",
        "raylet" (this node's raylet died), "actor", "lost" (the supervisor was killed)).

        The raylet's death reaches the server through GCS only after its health checks fail,
        but this actor may still answer (calls to it go straight to its worker), so its report
        must say that the node was lost rather than that the command failed."""
        deadline = time.monotonic() + wait_s
        with self._lock:
            while not self._lines and not self._done():
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._lock.wait(left)
            batch: list[bytes] = []
            size = 0
            while self._lines and size < _BATCH_BYTES:
                line = self._lines.popleft()
                batch.append(line)
                size += len(line)
            self._buffered -= size
            self._lock.notify_all()
            done = self._done() and not self._lines
            return batch, (self._exit_code if done else None), (self._cause if done else "-")

    def stop(self, grace_s: float) -> int | None:
        """SIGCONT and SIGTERM to the supervisor (it stops the command's tree: the stop
        signal, grace, KILL); wait for it. Returns the exit code, or None if nothing was
        started. A supervisor that has not ended in time (its job keeps it stopped) is killed,
        and the job's processes with it (`_read_status`)."""
        if not self._started:
            return None
        self._signal(signal.SIGCONT)
        self._signal(signal.SIGTERM)
        deadline = time.monotonic() + grace_s + _STOP_MARGIN_S
        with self._lock:
            while not self._done() and time.monotonic() < deadline:
                self._lock.wait(max(0.0, deadline - time.monotonic()))
            if self._done():
                return self._exit_code
        self._signal(signal.SIGKILL)
        with self._lock:
            while not self._done():
                self._lock.wait(1)
            return self._exit_code

    def _signal(self, sig: int) -> None:
        try:
            if self._pidfd >= 0:
                signal.pidfd_send_signal(self._pidfd, sig)
            else:
                os.kill(self._pid, sig)
        except OSError:
            pass  # already gone


def _read_line(stream: Any) -> bytes:
    """One line from an unbuffered binary stream (b"" at EOF)."""
    line = b""
    while not line.endswith(b"\n"):
        byte = stream.read(1)
        if not byte:
            break
        line += byte
    return line.strip()
