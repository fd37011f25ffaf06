"""What every use case on jobs works with (submit, reads, verbs): the journal and its book, the
store, the live scheduler, stop requests, the inventory, the job's files and the clock; built
once by `bootstrap.build_core` and shared by the use cases, each a small class over it."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from gpuyard.services.jobs.book import JobBook
from gpuyard.services.jobs.journal import Journal
from gpuyard.services.jobs.stops import StopRequests
from gpuyard.services.ports import JobStore
from gpuyard.services.scheduler.inventory import Inventory
from gpuyard.services.scheduler.live import LiveScheduler
from gpuyard.services.store_calls import StoreCalls


def _keep_files(job_id: int) -> None:
    """A desk built without an executor's folders (a test's) has none to remove."""


@dataclass(frozen=True, slots=True)
class JobDesk:
    """The parts the job use cases share. `wake`: the controller's next pass is due (a change
    for the scheduler); `log_path`/`remove_files`: the executor's job folder; `store_calls`:
    where the event loop's store reads run, with their deadline (`services/store_calls.py`)."""

    journal: Journal
    store: JobStore
    scheduler: LiveScheduler
    stops: StopRequests
    inventory: Inventory
    log_path: Callable[[int], str]
    wake: Callable[[], None]
    clock: Callable[[], float] = time.time
    remove_files: Callable[[int], None] = _keep_files
    store_calls: StoreCalls = field(default_factory=StoreCalls)

    @property
    def book(self) -> JobBook:
        return self.journal.book
