"""A running gang job on Ray: its nodes' output in one log, its outcome, its stop.

`gang.launch` returns a `GangHandle` once every node's command runs: the launch is a sequence
of Ray calls that leaves nothing behind when it fails, the handle is threads that live as long
as the job, hence two modules. The handle runs one thread per node that long-polls its actor
for output lines and appends them to the job's single log file on the server's machine, each
prefixed with `[node<rank>] ` (the rank-level prefix within a node is torchrun's business, e.g.
`--tee 3`); gpuyard's own notes are prefixed `[gpuyard] `. A coordinator thread decides the
outcome, first event wins:

- every node exits 0 -> COMPLETED;
- a node exits non-zero (negative: killed by that signal) -> FAILED with that node and code;
- a node's supervisor reached the time limit -> TIMED_OUT; the coordinator keeps the same
  limit, counted from when every node runs, plus the grace period and a margin, as a second
  guard (a supervisor its job stopped cannot act);
- a node is lost -> NODE_LOST with that node's id and `node_alive`. Two detectors, the first
  wins: (a) the node's supervisor watches its raylet's pid (pidfd) and, when the raylet exits, stops
  the command and reports so through the actor, which still answers (actor calls go from
  worker to worker, not through the raylet) -> `node_alive=False` at once, before GCS's health
  checks (Ray's defaults: ~30 s) have noticed; (b) a call to the node's actor fails:
  ActorDiedError when GCS declares the actor dead (its worker died: `node_alive` True; its node
  failed the health checks, e.g. the machine is gone: False), NodeDiedError and other Ray
  errors alike; ActorUnavailableError is retried for 30 s first. The server should match a
  returning machine by hostname/IP: a restarted raylet gets a new node id;
- `stop()` -> CANCELLED.

Then every node still running is stopped (the stop signal to its process tree, `grace_s`,
SIGKILL: its supervisor does it on the node), the output is drained, the actors are killed and
the placement group removed; only then is the result set and the callbacks called. On a lost
node the supervisor stops the command by itself (its raylet exited, or its actor's process went
away).
"""

from __future__ import annotations

import enum
import logging
import os
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# Only `import ray` (attribute access below), as in gang.py.
import ray

log = logging.getLogger("gpuyard.adapters.ray.gang")  # the gang's logger, launch and handle

_POLL_S = 0.5  # how long one poll call waits for output
_UNAVAILABLE_S = 30.0  # an actor unavailable (or silent) this long counts as a lost node
_GUARD_MARGIN_S = 5.0  # the coordinator's time limit: the nodes' own, + grace, + this
_running: set[GangHandle] = set()  # jobs not yet ended, for `stop_all`
_running_lock = threading.Lock()


class GangOutcome(enum.Enum):
    COMPLETED = "completed"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    CANCELLED = "cancelled"
    NODE_LOST = "node_lost"


@dataclass(frozen=True)
class GangNode:
    """Where one node rank of the job runs, and the GPUs Ray gave it."""

    rank: int
    node_id: str
    ip: str
    hostname: str
    gpu_ids: tuple[str, ...]  # ray.get_gpu_ids() in the node's actor
    cuda_visible_devices: str  # what the node's command sees
    worker_pid: int  # the Ray worker process hosting the node's actor (diagnostics, tests)


@dataclass(frozen=True)
class GangResult:
    outcome: GangOutcome
    detail: str  # one human line, also written to the log
    node_rank: int | None = None  # the node that failed or was lost
    node_id: str | None = None
    exit_code: int | None = None  # FAILED: that node's code (negative: its signal)
    exit_codes: tuple[int | None, ...] = ()  # per node rank; None: unknown (lost, no reply)
    node_alive: bool | None = None  # NODE_LOST: does Ray still list the node alive?


class GangHandle:
    """A running gang job: its nodes, its end (`wait`, callbacks) and its cancel (`stop`)."""

    def __init__(
        self,
        job_id: int,
        nodes: tuple[GangNode, ...],
        master_addr: str,
        master_port: int,
        pg: Any,
        actors: list[Any],
        log_fd: int,
        log_path: str | os.PathLike[str],
        grace_s: float,
        time_limit_s: float | None,
    ) -> None:
        self.job_id = job_id
        self.nodes = nodes
        self.master_addr = master_addr
        self.master_port = master_port
        self.placement_group_id: str = pg.id.hex()
        self.log_path = os.fspath(log_path)
        self._pg = pg
        self._actors = actors
        self._grace_s = grace_s
        self._time_limit_s = time_limit_s
        self._events: queue.Queue[tuple[str, int, Any]] = queue.Queue()
        self._exit_codes: list[int | None] = [None] * len(nodes)
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._result: GangResult | None = None
        self._callbacks: list[Callable[[GangResult], None]] = []
        self._log_fd = log_fd
        self._log_lock = threading.Lock()
        self._pollers: list[threading.Thread] = []

    # ---- public -------------------------------------------------------------------------

    @property
    def result(self) -> GangResult | None:
        return self._result

    def done(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> GangResult | None:
        """The job's result once it ended and was cleaned up; None if `timeout` passed first."""
        self._done.wait(timeout)
        return self._result

    def add_done_callback(self, fn: Callable[[GangResult], None]) -> None:
        """Call `fn(result)` when the job has ended (at once if it has); from gpuyard's thread."""
        with self._lock:
            if self._result is None:
                self._callbacks.append(fn)
                return
            result = self._result
        _call(fn, result)

    def stop(
        self, reason: str = "cancelled", wait: bool = True, timeout: float | None = None
    ) -> GangResult | None:
        """Cancel: stop every node (TERM, grace, KILL), kill the actors, remove the group."""
        self._events.put(("stop", -1, reason))
        return self.wait(timeout) if wait else self._result

    # ---- internals ----------------------------------------------------------------------

    def _run(self) -> None:
        with _running_lock:
            _running.add(self)
        for node, actor in zip(self.nodes, self._actors, strict=True):
            thread = threading.Thread(
                target=self._poll, args=(node, actor), daemon=True,
                name=f"gpuyard-ray-{self.job_id}-node{node.rank}",
            )  # fmt: skip
            self._pollers.append(thread)
            thread.start()
        threading.Thread(
            target=self._coordinate, daemon=True, name=f"gpuyard-ray-{self.job_id}"
        ).start()

    def _poll(self, node: GangNode, actor: Any) -> None:
        prefix = f"[node{node.rank}] ".encode()
        unavailable_since: float | None = None
        while True:
            try:
                lines, code, cause = ray.get(
                    actor.poll.remote(_POLL_S), timeout=_POLL_S + _UNAVAILABLE_S
                )
            except (ray.exceptions.ActorUnavailableError, ray.exceptions.GetTimeoutError) as exc:
                now = time.monotonic()
                unavailable_since = unavailable_since or now
                if now - unavailable_since < _UNAVAILABLE_S:
                    time.sleep(0.2)
                    continue
                self._events.put(("lost", node.rank, exc))
                return
            except ray.exceptions.RayTaskError as exc:  # a gpuyard bug on the node side
                self._events.put(("error", node.rank, exc))
                return
            except BaseException as exc:  # ActorDiedError, NodeDiedError, ...: the node is gone
                # (also SystemExit, which ray.get raises in other threads during ray.shutdown)
                self._events.put(("lost", node.rank, exc))
                return
            unavailable_since = None
            if lines:
                self._write(b"".join(prefix + line + b"\n" for line in lines))
            if code is not None:
                self._exit_codes[node.rank] = int(code)
                if cause == "raylet":
                    self._events.put(("lost", node.rank, "its raylet exited"))
                elif cause == "timeout":
                    self._events.put(("timeout", node.rank, int(code)))
                else:
                    self._events.put(("exit", node.rank, int(code)))
                return

    def _coordinate(self) -> None:
        try:
            result = self._decide()
            self._note(result.detail)
            self._wind_down(result)
        except Exception as exc:  # never leave a job without an end
            log.exception("gang job %s: coordinator failed", self.job_id)
            result = GangResult(GangOutcome.FAILED, f"gpuyard error: {exc!r}")
            teardown(self._actors, self._pg, self._grace_s)
        result = GangResult(
            result.outcome, result.detail, result.node_rank, result.node_id, result.exit_code,
            tuple(self._exit_codes), result.node_alive,
        )  # fmt: skip
        with self._lock:
            self._result = result
            callbacks, self._callbacks = self._callbacks, []
        with _running_lock:
            _running.discard(self)
        try:
            os.close(self._log_fd)
        except OSError:
            pass
        self._done.set()
        for fn in callbacks:
            _call(fn, result)

    def _decide(self) -> GangResult:
        deadline = None
        if self._time_limit_s is not None:  # the second guard (see the module docstring)
            deadline = time.monotonic() + self._time_limit_s + self._grace_s + _GUARD_MARGIN_S
        finished: set[int] = set()
        while True:
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                kind, rank, value = self._events.get(timeout=timeout)
            except queue.Empty:
                return GangResult(
                    GangOutcome.TIMED_OUT, f"time limit of {self._time_limit_s:g}s reached"
                )
            node = self.nodes[rank] if rank >= 0 else None
            if kind == "stop":
                return GangResult(GangOutcome.CANCELLED, f"stop requested: {value}")
            assert node is not None
            if kind == "timeout":
                return GangResult(
                    GangOutcome.TIMED_OUT, f"time limit of {self._time_limit_s:g}s reached"
                )
            if kind == "exit" and value == 0:
                finished.add(rank)
                if len(finished) == len(self.nodes):
                    return GangResult(GangOutcome.COMPLETED, "every node exited with code 0")
            elif kind == "exit":
                how = f"was killed by signal {-value}" if value < 0 else f"exited with code {value}"
                return GangResult(
                    GangOutcome.FAILED, f"node{rank} ({node.hostname}) {how}",
                    node_rank=rank, node_id=node.node_id, exit_code=value,
                )  # fmt: skip
            elif kind == "lost":
                if isinstance(value, str):  # the node's supervisor saw its raylet exit
                    alive: bool | None = False
                    why = value
                else:
                    alive = node_alive(node.node_id)
                    state = "its actor died" if alive else "Ray lists the node dead"
                    why = f"{state} ({type(value).__name__})"
                return GangResult(
                    GangOutcome.NODE_LOST,
                    f"lost node{rank} ({node.hostname}, ray node {node.node_id}): {why}",
                    node_rank=rank, node_id=node.node_id, node_alive=alive,
                )  # fmt: skip
            else:
                return GangResult(
                    GangOutcome.FAILED, f"node{rank}: gpuyard's node runner failed: {value}",
                    node_rank=rank, node_id=node.node_id,
                )  # fmt: skip

    def _wind_down(self, result: GangResult) -> None:
        """Stop what still runs, drain its output, then remove actors and placement group."""
        for thread, actor in zip(self._pollers, self._actors, strict=True):
            if thread.is_alive():
                try:
                    actor.stop.remote(float(self._grace_s))  # the poller reports its exit
                except Exception:  # the actor is gone too: its poller will say so
                    pass
        deadline = time.monotonic() + self._grace_s + 15
        for thread in self._pollers:
            thread.join(max(0.0, deadline - time.monotonic()))
        for kind, rank, value in _drain(self._events):
            if kind == "lost" and rank != result.node_rank:
                self._note(f"node{rank} was lost while stopping: {type(value).__name__}")
        teardown(self._actors, self._pg, 0)

    def _note(self, text: str) -> None:
        self._write(f"[gpuyard] {text}\n".encode())

    def _write(self, data: bytes) -> None:
        with self._log_lock:
            try:
                os.write(self._log_fd, data)
            except OSError:
                log.warning("gang job %s: cannot write its log", self.job_id, exc_info=True)


def stop_all(reason: str, timeout: float | None = None) -> None:
    """Stop every gang job still running in this process (before disconnecting from Ray)."""
    with _running_lock:
        handles = list(_running)
    for handle in handles:
        handle.stop(reason, wait=False)
    for handle in handles:
        handle.wait(timeout)


def teardown(actors: list[Any], pg: Any, grace_s: float) -> None:
    """Stop commands (if any run), kill the actors, remove the placement group."""
    if grace_s > 0 and actors:
        try:
            ray.wait([a.stop.remote(float(grace_s)) for a in actors],
                     num_returns=len(actors), timeout=grace_s + 10)  # fmt: skip
        except Exception:
            pass
    for actor in actors:
        try:
            ray.kill(actor, no_restart=True)
        except Exception:
            pass
    if pg is None:
        return
    try:
        ray.util.remove_placement_group(pg)
    except Exception:
        log.warning("cannot remove placement group %s", pg.id.hex(), exc_info=True)


def node_alive(node_id: str) -> bool | None:
    try:
        for raw in ray.nodes():
            if raw["NodeID"] == node_id:
                return bool(raw.get("Alive"))
    except Exception:
        return None
    return False


def _drain(events: queue.Queue[tuple[str, int, Any]]) -> list[tuple[str, int, Any]]:
    items = []
    while True:
        try:
            items.append(events.get_nowait())
        except queue.Empty:
            return items


def _call(fn: Callable[[GangResult], None], result: GangResult) -> None:
    try:
        fn(result)
    except Exception:
        log.exception("gang job end callback failed")
