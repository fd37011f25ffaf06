"""GPUs out of service: drained by an admin, by the health guard, or by a lost Ray machine.

A drain is durable and keyed by the GPU's UUID (indices are renumbered when a Ray cluster
changes; a UUID names the same device across restarts). Draining a GPU marks every job running
on it to end NODE_FAIL (a stop intent, through the journal) and tells the scheduler; resuming
tells the scheduler again. The current drains are kept under this service's own lock: the API,
the telemetry thread and the Ray node watch all call in.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from gpuyard.domain.errors import Conflict, NotFound
from gpuyard.domain.job import Drain, Gpu, Job
from gpuyard.domain.states import JobState
from gpuyard.services.inventory import Inventory
from gpuyard.services.journal import Journal
from gpuyard.services.live_scheduler import LiveScheduler
from gpuyard.services.ports import JobStore

log = logging.getLogger("gpuyard.drains")

# A job already ending for good (cancelled, or failed with its GPU) keeps that end.
FINAL_INTENTS = frozenset({JobState.CANCELLED, JobState.NODE_FAIL, JobState.OUT_OF_MEMORY})
LEGACY_KEY = "index:"  # drains recorded by index before they were keyed by UUID


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
    ) -> None:
        self._store = store
        self._journal = journal
        self._scheduler = scheduler
        self._inventory = inventory
        self._binds_devices = binds_devices
        self._clock = clock
        self._wake = wake
        self._lock = threading.Lock()
        self._by_index: dict[int, Drain] = {}
        for key, drain in store.load_drains().items():
            gpu = self._gpu_of_key(key)
            if gpu is None:
                log.warning("a drain of GPU %s is kept, but that GPU is not here now", key)
                continue
            self._by_index[gpu.index] = drain
            scheduler.drained(gpu.index, True, drain.drained_at)

    def current(self) -> dict[int, Drain]:
        """GPU index -> why it is out of service."""
        with self._lock:
            return dict(self._by_index)

    def drain(self, gpu_index: int, reason: str, source: str) -> list[Job]:
        """Take a GPU out of service; jobs running on it are marked to end NODE_FAIL (the
        journal's observers stop them). Returns those jobs."""
        gpu = self.gpu(gpu_index)
        if source == "admin" and not self._binds_devices:
            raise Conflict(
                f"GPU {gpu_index} is on {gpu.node}, where the backend (Ray) chooses each job's "
                "physical GPUs itself: a drain of one GPU could not keep jobs off it. Take the "
                "machine out of the Ray cluster instead"
            )
        now = self._clock()
        drain = Drain(reason, source, now)
        with self._lock:
            self._store.save_drain(gpu.uuid, drain)
            self._by_index[gpu_index] = drain
        self._scheduler.drained(gpu_index, True, now)
        why = f"NodeFail: GPU {gpu_index} was taken out of service: {reason}"
        failing = []
        with self._journal.transaction() as tx:
            for job in self._journal.book.running():
                current = tx.current(job.id) or job
                if gpu_index in current.gpus and current.stop_intent not in FINAL_INTENTS:
                    failing.append(current.with_changes(stop_intent=JobState.NODE_FAIL, reason=why))
            tx.commit(failing, now)
        log.warning("GPU %s drained (%s): %s", gpu_index, source, reason)
        self._wake()
        return failing

    def resume(self, gpu_index: int) -> None:
        """Put a drained GPU back in service."""
        gpu = self.gpu(gpu_index)
        with self._lock:
            if gpu_index not in self._by_index:
                raise Conflict(f"GPU {gpu_index} is in service; there is nothing to resume")
            self._store.save_drain(gpu.uuid, None)
            self._store.save_drain(f"{LEGACY_KEY}{gpu_index}", None)
            del self._by_index[gpu_index]
        self._scheduler.drained(gpu_index, False, self._clock())
        log.info("GPU %s back in service", gpu_index)
        self._wake()

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
