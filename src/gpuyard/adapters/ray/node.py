"""The per-node side of a gang: one `NodeRunner` Ray actor per placement-group bundle.

It runs inside a Ray worker on its node, holding the bundle's GPUs and CPUs (so Ray has set
CUDA_VISIBLE_DEVICES to exactly the GPUs it gave this bundle). It starts the node's command
through `shim.py` and hands the output back to the server by long polling:

- `poll(wait_s)` returns the lines produced since the last call (waiting up to `wait_s` for at
  least one) and, once the command has ended and its output is drained, its exit code. Polling
  rather than a streaming generator: one plain call per batch, no generator back-pressure
  settings, and a dead node surfaces as the call's `ActorDiedError` like any other call.
- The output buffer is bounded (`_MAX_BUFFERED`): when the server falls behind, the reader stops
  reading and the job blocks on its stdout instead of the actor growing without limit.

The actor is a threaded actor (`max_concurrency`): `stop` must run while a `poll` is waiting.
Nothing here keeps a job alive on its own: the shim (detached from this worker, see shim.py)
watches a pipe that only this process holds and the node's raylet, so when either goes away
the shim stops the command's whole tree, and tells this actor (if it still runs) which.

Every node needs gpuyard (same version) installed in the Python its raylet starts workers with:
Ray imports this class by reference, and the shim's path comes from this package.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

_SHIM = str(Path(__file__).with_name("shim.py"))
_MAX_BUFFERED = 8 << 20  # bytes of output held for the server before the job is throttled
_MAX_LINE = 64 << 10  # a longer "line" (no newline) is handed back in pieces
_BATCH_BYTES = 1 << 20  # at most this much per poll
# The node's own environment reaches the job (PATH, HOME, ...), but not Ray's (the cluster
# token's path, the worker's job id, ...) nor a gpuyard server's settings.
_NOT_INHERITED = ("RAY_", "GPUYARD_")


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
        self._eof = False
        self._exit_code: int | None = None
        self._raylet_died = False  # the shim stopped the command because the raylet exited
        self._shim_pid = 0
        self._pidfd = -1  # the shim's, so a signal never reaches a reused pid
        self._control_w = -1  # held open for the shim's life: EOF tells it we are gone
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
        self, argv: list[str], env: dict[str, str], grace_s: float, workdir: str | None
    ) -> int:
        """Start the command through the (detached) shim; returns the shim's pid."""
        assert not self._started, "a NodeRunner runs one command"
        self._started = True
        child_env = node_environment(dict(os.environ), env)
        # Ray's GPUs for this bundle, whatever the job's env said.
        child_env["CUDA_VISIBLE_DEVICES"] = os.environ.get("CUDA_VISIBLE_DEVICES", "")
        raylet_pid = os.environ.get("RAY_RAYLET_PID", "0")
        control_r, self._control_w = os.pipe()  # all four ends close-on-exec
        status_r, status_w = os.pipe()
        try:
            launcher = subprocess.Popen(
                [sys.executable, "-I", "-S", _SHIM, repr(grace_s), workdir or "", raylet_pid,
                 str(status_w), "--", *argv],
                stdin=control_r,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env=child_env,
                start_new_session=True,
                pass_fds=(status_w,),
            )  # fmt: skip
        finally:
            os.close(control_r)
            os.close(status_w)
        launcher.wait()  # the first shim process exits once the real one has detached
        assert launcher.stdout is not None
        status = os.fdopen(status_r, "rb", buffering=0)
        first = _read_line(status)
        if not first.startswith(b"pid "):
            status.close()
            raise RuntimeError(f"the node shim did not start: {first!r}")
        self._shim_pid = int(first.split()[1])
        try:
            self._pidfd = os.pidfd_open(self._shim_pid)
        except (AttributeError, OSError):
            self._pidfd = -1
        # The stream itself (not its fd number): it must stay referenced, or GC closes it.
        threading.Thread(target=self._read, args=(launcher.stdout, status), daemon=True).start()
        return self._shim_pid

    def _read(self, output: Any, status: Any) -> None:
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
        # Output EOF: the shim and everything it ran are gone; its last word is the code.
        code = -signal.SIGKILL  # no word: the shim itself was killed
        raylet_died = False
        for line in iter(lambda: _read_line(status), b""):
            if line.startswith(b"exit "):
                _, word, *cause = line.split()
                code, raylet_died = int(word), cause == [b"raylet"]
        status.close()
        with self._lock:
            self._exit_code = code
            self._raylet_died = raylet_died
            self._eof = True
            self._lock.notify_all()

    def _push(self, lines: list[bytes]) -> None:
        with self._lock:
            self._lines.extend(lines)
            self._buffered += sum(len(line) for line in lines)
            self._lock.notify_all()

    def poll(self, wait_s: float) -> tuple[list[bytes], int | None, bool]:
        """(new output lines, the exit code once the command ended and all output was read,
        whether it was stopped because this node's raylet died).

        The raylet's death reaches the server through GCS only after its health checks fail,
        but this actor may still answer (calls to it go straight to its worker), so its report
        must say that the node was lost rather than that the command failed."""
        deadline = time.monotonic() + wait_s
        with self._lock:
            while not self._lines and not self._eof:
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
            done = self._eof and not self._lines
            return batch, (self._exit_code if done else None), done and self._raylet_died

    def stop(self, grace_s: float) -> int | None:
        """SIGTERM to the shim (it stops the command's tree: TERM, grace, KILL); wait for it.

        Returns the exit code, or None if nothing was started. If the shim itself does not end
        in time, it and everything below it are killed here.
        """
        if not self._started:
            return None
        self._signal_shim(signal.SIGTERM)
        deadline = time.monotonic() + grace_s + 5
        with self._lock:
            while not self._eof and time.monotonic() < deadline:
                self._lock.wait(max(0.0, deadline - time.monotonic()))
            if self._eof:
                return self._exit_code
        _kill_tree(self._shim_pid)
        with self._lock:
            while not self._eof:
                self._lock.wait(1)
            return self._exit_code

    def _signal_shim(self, sig: int) -> None:
        try:
            if self._pidfd >= 0:
                signal.pidfd_send_signal(self._pidfd, sig)
            else:
                os.kill(self._shim_pid, sig)
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


def _kill_tree(pid: int) -> None:
    """SIGKILL a process and all its descendants (the fallback if the shim is stuck)."""
    import psutil

    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return
    for proc in procs:
        try:
            proc.kill()
        except psutil.Error:
            pass
