"""A store of one database that implements every store port, given as `Stores`."""

from __future__ import annotations

from typing import Protocol

from gpuyard.services.ports import JobStore
from gpuyard.services.stores import (
    AccountStore,
    EventStore,
    GpuHistoryStore,
    LimitStore,
    NotifyStore,
    ProgressStore,
    Stores,
    SweepStore,
    UsageStore,
)


class EveryStore(
    JobStore, AccountStore, LimitStore, UsageStore, GpuHistoryStore, ProgressStore, SweepStore,
    NotifyStore, EventStore, Protocol,
):  # fmt: skip
    """`SqlJobStore` and `MemoryJobStore`: each port's tables in one database."""


def every_port(store: EveryStore) -> Stores:
    """`store` as each port's store (mypy checks it implements them all)."""
    return Stores(
        jobs=store, accounts=store, limits=store, usage=store, gpu_history=store,
        progress=store, sweeps=store, notify=store, events=store,
    )  # fmt: skip
