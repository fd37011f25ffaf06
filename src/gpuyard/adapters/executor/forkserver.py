"""The supervisor fork server's client: supervisors started in about a millisecond.

Starting `python -I -S supervisor.pyc` per job costs an interpreter start-up and the subreaper's
`ctypes` (~8 ms), most of a job's submit-to-running time. One process started that way at the
first launch (`supervisor.py --serve`, same clean environment) forks a supervisor per request
instead. Each fork calls `setsid`: it is not the server's child and outlives both the fork
server and the server, exactly like a supervisor started on its own (the executor already
watches supervisors by pidfd and re-adopts them by pid and start time after a restart).

The fork server reaps the supervisors it forked and reports their exit codes, so an exit that
is not 0 still gives away a status.json the job forged before killing its supervisor. If the
fork server is gone, a launch starts a new one; an exit code it could not report is unknown,
and the executor treats that supervisor as it treats an adopted one (it checks for leftovers).
A fork server that dies or stalls after a request was sent fails that launch (never retried:
the request may have been forked).
"""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading
from pathlib import Path

_ANSWER_TIMEOUT_S = 10.0
_KEPT_EXITS = 4096  # exit codes nobody asked for (a launch abandoned): forgotten past this many


class ForkServerGone(OSError):
    """The fork server exited or stopped answering; start another or launch directly."""


class ForkServer:
    """One running fork server; `spawn` is thread-safe, answers are read by one thread."""

    def __init__(self, supervisor: str, jobs_dir: Path, env: dict[str, str]) -> None:
        self._proc = subprocess.Popen(
            # jobs_dir on the command line: tools that find a server's supervisors by it
            # (their command line is this one) find these too.
            [sys.executable, "-I", "-S", supervisor, "--serve", str(jobs_dir)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            env=env, start_new_session=True, close_fds=True,
        )  # fmt: skip
        self._answers: queue.SimpleQueue[int] = queue.SimpleQueue()  # pid, or -errno
        self._exits: dict[int, int] = {}
        self._changed = threading.Condition()
        self._gone = False
        self._spawning = threading.Lock()  # one request at a time: answers come in order
        threading.Thread(target=self._read, name="gpuyard-forkserver", daemon=True).start()

    @property
    def alive(self) -> bool:
        return not self._gone

    def spawn(self, jobdir: Path, log_path: str) -> int:
        """A supervisor for `jobdir`, its output appended to `log_path`; its pid."""
        paths = (os.fsencode(jobdir), os.fsencode(log_path))
        if any(b"\0" in path for path in paths):
            raise ValueError("a path with a NUL byte")
        request = b"".join(path + b"\0" for path in paths)
        with self._spawning:
            if self._gone:
                raise ForkServerGone("the supervisor fork server is gone")
            stdin = self._proc.stdin
            assert stdin is not None
            try:
                stdin.write(request)
                stdin.flush()
                answer = self._answers.get(timeout=_ANSWER_TIMEOUT_S)
            except (OSError, queue.Empty) as exc:
                self._gone = True
                raise ForkServerGone(f"the supervisor fork server did not answer: {exc}") from exc
        if answer == 0:
            raise ForkServerGone("the supervisor fork server exited")
        if answer < 0:
            raise OSError(-answer, os.strerror(-answer))
        return answer

    def exit_code(self, pid: int, timeout_s: float = 2.0) -> int | None:
        """The exit code of supervisor `pid` once it ended (its pidfd can fire a moment before
        the report arrives); None if the fork server cannot tell any more."""
        with self._changed:
            self._changed.wait_for(lambda: pid in self._exits or self._gone, timeout_s)
            return self._exits.pop(pid, None)

    def close(self) -> None:
        """Stop the fork server; the supervisors it forked run on."""
        stdin = self._proc.stdin
        if stdin is not None:
            try:
                stdin.close()
            except OSError:
                pass
        try:
            self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()

    def _read(self) -> None:
        stdout = self._proc.stdout
        assert stdout is not None
        for line in stdout:
            kind, _, rest = line.decode().partition(" ")
            if kind == "pid":
                self._answers.put(int(rest))
            elif kind == "error":
                self._answers.put(-int(rest))
            elif kind == "exit":
                pid, code = map(int, rest.split())
                with self._changed:
                    if len(self._exits) >= _KEPT_EXITS:
                        self._exits.clear()
                    self._exits[pid] = code
                    self._changed.notify_all()
        with self._changed:
            self._gone = True
            self._changed.notify_all()
        self._answers.put(0)  # a spawn waiting for its answer learns the server is gone
        self._proc.wait()
