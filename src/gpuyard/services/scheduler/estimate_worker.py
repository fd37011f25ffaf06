"""The estimator's mirror of the policy, in a process of its own.

A projection over 10,000 pending jobs is a few hundred milliseconds of pure Python, and copying
the policy for it is tens of milliseconds of C that never lets go of the GIL. In the server's
process that starves the event loop (measured: submit p99 120 ms while projections ran, 14 ms
without). So the mirror lives in a child process (`python -m
gpuyard.services.scheduler.estimate_worker`):
the server sends it the ops each pass recorded and asks for projections; the child replays,
copies and projects on the other core. Messages are pickled frames (4-byte length, then the
pickle) over the child's stdin/stdout; the child ends when its stdin closes (the server exited).

`MirrorEngine` is the child's whole state and logic; the server also runs one in-process when
no child can be started.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import struct
import subprocess
import sys
from collections.abc import Collection
from typing import IO, Any

from gpuyard.domain.job import Job
from gpuyard.scheduling.projection import Projection, StartEstimates, project_starts
from gpuyard.services.scheduler.pass_view import waits_for
from gpuyard.services.scheduler.policy_steps import Op, PolicyFeed, sched_job

_HEADER = struct.Struct("!I")

# Requests and their answers (tuples, pickled):
#   ("init", world: bytes, generation)                 no answer
#   ("ops", [(generation, ops), ...])                  no answer
#   ("project", now, budget_s, held)  -> ("ok", generation, StartEstimates) | ("diverged",)
#   ("dry_run", probe: Job, now, budget_s, held)
#                -> ("ok", generation, Projection, what binds now: str | None) | ("diverged",)
# `held`: the ids the gate holds now; one the last pass still had pending leaves the copy (a
# hold counts at once, not from the next pass on).


class MirrorEngine:
    """A mirror of the live policy fed recorded ops, and the projections made from it."""

    def __init__(self) -> None:
        self.feed: PolicyFeed | None = None  # None: not initialised, or it decided otherwise
        self.generation = 0

    def init(self, world: bytes, generation: int) -> None:
        policy, cluster, jobs, parked = pickle.loads(world)
        self.feed = PolicyFeed(policy, cluster, record=False)
        self.feed.jobs, self.feed.parked = jobs, parked
        self.generation = generation

    def apply(self, batches: list[tuple[int, list[Op]]]) -> None:
        for generation, ops in batches:
            if self.feed is None:
                return
            if not self.feed.replay(ops):
                self.feed = None  # the server will send a fresh world
                return
            self.generation = generation

    def project(self, now: float, budget_s: float, held: Collection[int] = ()) -> tuple[Any, ...]:
        copied = self._copy(held, now)
        if copied is None:
            return ("diverged",)
        policy, cluster, running = copied
        projected = project_starts(policy, cluster, running, now, budget_s=budget_s)
        return ("ok", self.generation, projected.estimates)

    def dry_run(
        self, probe: Job, now: float, budget_s: float, held: Collection[int] = ()
    ) -> tuple[Any, ...]:
        copied = self._copy(held, now)
        if copied is None:
            return ("diverged",)
        policy, cluster, running = copied
        job = sched_job(probe)
        short = waits_for(cluster, job)  # what binds now, before the projection moves on
        policy.submit(job, now)
        projection = project_starts(
            policy, cluster, running, now, wanted={job.id}, max_events=100_000,
            budget_s=budget_s, explain={job.id},
        )  # fmt: skip
        return ("ok", self.generation, projection, None if short is None else short.text())

    def _copy(self, held: Collection[int], now: float) -> tuple[Any, Any, Any] | None:
        """The policy, cluster and running jobs, copied; the pending jobs in `held` cancelled
        in the copy (copied in the same pickle, so they are the copy's own objects)."""
        feed = self.feed
        if feed is None:
            return None
        running = [job for job in feed.jobs.values() if job.running]
        holding = [job for i in held if (job := feed.jobs.get(i)) is not None and not job.running]
        policy, cluster, running, holding = pickle.loads(
            pickle.dumps((feed.policy, feed.cluster, running, holding), protocol=5)
        )
        for job in holding:
            policy.cancel(job, now)
        return policy, cluster, running

    def handle(self, message: tuple[Any, ...]) -> tuple[Any, ...] | None:
        """One request; its answer, or None for requests that have none."""
        kind = message[0]
        if kind == "init":
            self.init(message[1], message[2])
        elif kind == "ops":
            self.apply(message[1])
        elif kind == "project":
            return self.project(*message[1:])
        elif kind == "dry_run":
            return self.dry_run(*message[1:])
        else:
            raise ValueError(f"unknown request {kind!r}")
        return None


def write_frame(stream: IO[bytes], message: object) -> None:
    data = pickle.dumps(message, protocol=5)
    stream.write(_HEADER.pack(len(data)) + data)
    stream.flush()


def read_frame(stream: IO[bytes]) -> Any:
    """The next message, or raises EOFError when the other side has gone."""
    header = stream.read(_HEADER.size)
    if len(header) < _HEADER.size:
        raise EOFError
    size = _HEADER.unpack(header)[0]
    data = stream.read(size)
    if len(data) < size:
        raise EOFError
    return pickle.loads(data)


class WorkerProcess:
    """The server's handle on the child: send requests, wait for answers."""

    def __init__(self) -> None:
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "gpuyard.services.scheduler.estimate_worker"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, close_fds=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )  # fmt: skip

    def send(self, message: tuple[Any, ...]) -> None:
        assert self._proc.stdin is not None
        write_frame(self._proc.stdin, message)

    def ask(self, message: tuple[Any, ...]) -> Any:
        self.send(message)
        assert self._proc.stdout is not None
        return read_frame(self._proc.stdout)

    def close(self) -> None:
        """Close its stdin (it exits) and reap it."""
        with contextlib.suppress(OSError):
            if self._proc.stdin is not None:
                self._proc.stdin.close()
        try:
            self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        if self._proc.stdout is not None:
            self._proc.stdout.close()


def main() -> None:
    """The child: answer requests from stdin on stdout until stdin closes. Signals meant for
    the server's process group (Ctrl-C, a service manager's SIGTERM) are the server's to act
    on: the child ends when the server has gone (its stdin closes), never before it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    engine = MirrorEngine()
    requests, answers = sys.stdin.buffer, sys.stdout.buffer
    with contextlib.suppress(EOFError, BrokenPipeError):
        while True:
            answer = engine.handle(read_frame(requests))
            if answer is not None:
                write_frame(answers, answer)


if __name__ == "__main__":
    main()

__all__ = ["MirrorEngine", "Projection", "StartEstimates", "WorkerProcess", "main", "read_frame",
           "write_frame"]  # fmt: skip
