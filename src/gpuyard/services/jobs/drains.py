"""GPUs out of service: drained by an admin, by the health guard, or by a lost Ray machine.

A drain is durable and keyed by the GPU's UUID (indices are renumbered when a Ray cluster
changes; a UUID names the same device across restarts). An admin's drain is Slurm's DRAIN: no
new job goes there and the jobs running there finish; with `--now` they are stopped and
requeued (stop intent PENDING, as a preemption). A broken GPU's drain (health guard, a lost Ray
machine) marks them to end NODE_FAIL. Every stop intent goes through the journal; the scheduler
is told of the drain, and of the resume. The current drains are kept under this service's own
lock: the API, the telemetry thread and the Ray node watch all call in.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

from gpuyard.domain.errors import Conflict, NotFound
from gpuyard.domain.job import Drain, Gpu, Job
from gpuyard.domain.states import JobState
from gpuyard.services.jobs.crashpoints import crash_point
from gpuyard.services.jobs.journal import Journal
from gpuyard.services.ports import JobStore
from gpuyard.services.scheduler.inventory import Inventory
from gpuyard.services.scheduler.live import LiveScheduler

log = logging.getLogger("gpuyard.drains")

# A job already ending for good (cancelled, or failed with its GPU) keeps that end.
FINAL_INTENTS = frozenset({JobState.CANCELLED, JobState.NODE_FAIL, JobState.OUT_OF_MEMORY})
LEGACY_KEY = "index:"  # drains recorded by index before they were keyed by UUID

# Told of each drain saved (GPU index, the drain) or lifted (GPU index, None), under the drains'
# lock so in the order they happen: cheap, never blocking (the events ring, machine/).
DrainListener = Callable[[int, Drain | None], None]


class DrainService:
    """Takes GPUs out of service and puts them back, durably."""

    def __init__(
        self,
        store: JobStore,
        journal: Journal,
        scheduler: LiveScheduler,
        inventory: Inventory,
        *,
        binds_devices: bool,
        clock: Callable[[], float],
        wake: Callable[[], None],
        listeners: Sequence[DrainListener] = (),
    ) -> None:
        self._store = store
        self._journal = journal
        self._scheduler = scheduler
        self._inventory = inventory
        self._binds_devices = binds_devices
        self._clock = clock
        self._wake = wake
        self._listeners = tuple(listeners)
        self._lock = threading.Lock()
        self._by_index: dict[int, Drain] = {}
        for key, drain in store.load_drains().items():
            gpu = self._gpu_of_key(key)
            if gpu is None:
                log.warning("a drain of GPU %s is kept, but that GPU is not here now", key)
                continue
            self._by_index[gpu.index] = drain
            scheduler.drained(gpu.index, True, drain.drained_at)

    def machine_joined(self, gpus: Sequence[Gpu]) -> None:
        """A machine joined: a drain kept for one of its GPUs (by UUID, from when that machine
        was the server's before) holds again."""
        uuids = {gpu.uuid: gpu for gpu in gpus}
        for key, drain in self._store.load_drains().items():
            gpu = uuids.get(key)
            if gpu is not None:
                with self._lock:
                    self._by_index[gpu.index] = drain
                self._scheduler.drained(gpu.index, True, drain.drained_at)

    def current(self) -> dict[int, Drain]:
        """GPU index -> why it is out of service."""
        with self._lock:
            return dict(self._by_index)

    def drain(
        self, gpu_index: int, reason: str, source: str, *, now: bool = False,
        keep_jobs: bool = False,
    ) -> list[Job]:  # fmt: skip
        """Take a GPU out of service and return the jobs on it that are stopped (the journal's
        observers stop them). An admin's drain is Slurm's DRAIN: jobs running there go on
        (none returned), or with `now` are stopped and requeued, not failed (they did nothing
        wrong). A broken GPU (health guard, a lost Ray machine) fails them NODE_FAIL.
        `keep_jobs`: no job is stopped (a machine away is waited for: its jobs may still run)."""
        gpu = self.gpu(gpu_index)
        if source == "admin" and not self._binds_devices:
            raise Conflict(
                f"GPU {gpu_index} is on {gpu.node}, where the backend (Ray) chooses each job's "
                "physical GPUs itself: a drain of one GPU could not keep jobs off it. Take the "
                "machine out of the Ray cluster instead"
            )
        at = self._clock()
        drain = Drain(reason, source, at)
        with self._lock:
            self._store.save_drain(gpu.uuid, drain)
            self._by_index[gpu_index] = drain
            self._tell(gpu_index, drain)
        crash_point("drain_saved")
        self._scheduler.drained(gpu_index, True, at)
        if (source == "admin" and not now) or keep_jobs:
            stopping: list[Job] = []  # DRAIN: what runs there finishes
        elif source == "admin":
            why = f"Requeued: GPU {gpu_index} was drained at once (admin drain --now): {reason}"
            stopping = self._stop_jobs_on(gpu_index, JobState.PENDING, why, at)
        else:
            why = f"NodeFail: GPU {gpu_index} was taken out of service: {reason}"
            stopping = self._stop_jobs_on(gpu_index, JobState.NODE_FAIL, why, at)
        log.warning("GPU %s drained (%s): %s", gpu_index, source, reason)
        self._wake()
        return stopping

    def _stop_jobs_on(self, gpu_index: int, intent: JobState, why: str, at: float) -> list[Job]:
        """Give every job running on the GPU the stop intent, through the journal (a job
        already ending for good, or already being requeued, keeps that)."""
        stopping = []
        with self._journal.transaction() as tx:
            for job in self._journal.book.running():
                current = tx.current(job.id) or job
                keeps = current.stop_intent in FINAL_INTENTS or current.stop_intent is intent
                if gpu_index in current.gpus and not keeps:
                    stopping.append(current.with_changes(stop_intent=intent, reason=why))
            tx.commit(stopping, at)
        return stopping

    def resume(self, gpu_index: int) -> None:
        """Put a drained GPU back in service."""
        gpu = self.gpu(gpu_index)
        with self._lock:
            if gpu_index not in self._by_index:
                raise Conflict(f"GPU {gpu_index} is in service; there is nothing to resume")
            self._store.save_drain(gpu.uuid, None)
            self._store.save_drain(f"{LEGACY_KEY}{gpu_index}", None)
            del self._by_index[gpu_index]
            self._tell(gpu_index, None)
        self._scheduler.drained(gpu_index, False, self._clock())
        log.info("GPU %s back in service", gpu_index)
        self._wake()

    def _tell(self, gpu_index: int, drain: Drain | None) -> None:
        """Tell the listeners; one that fails is logged, never fails the drain or resume."""
        for listener in self._listeners:
            try:
                listener(gpu_index, drain)
            except Exception:
                log.exception("a drain listener failed on GPU %s", gpu_index)

    def gpu(self, gpu_index: int) -> Gpu:
        for gpu in self._inventory.gpus:
            if gpu.index == gpu_index:
                return gpu
        known = ", ".join(str(g.index) for g in self._inventory.gpus) or "none"
        raise NotFound(f"GPU {gpu_index} is not one of this server's GPUs ({known})")

    def _gpu_of_key(self, key: str) -> Gpu | None:
        for gpu in self._inventory.gpus:
            if gpu.uuid == key or key == f"{LEGACY_KEY}{gpu.index}":
                return gpu
        return None
