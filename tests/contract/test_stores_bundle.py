"""`stores()` on every store: the store itself for each port, none missing (bootstrap builds a
service only over a port the bundle has)."""

from __future__ import annotations

import dataclasses

from gpuyard.adapters.store.memory import MemoryJobStore
from gpuyard.adapters.store.sql import SqlJobStore
from gpuyard.services.ports import JobStore


def test_the_bundle_gives_the_store_for_every_port(store: JobStore) -> None:
    assert isinstance(store, SqlJobStore | MemoryJobStore)
    bundle = store.stores()
    ports = {f.name: getattr(bundle, f.name) for f in dataclasses.fields(bundle)}
    assert set(ports) == {
        "jobs", "accounts", "limits", "usage", "gpu_history", "progress", "sweeps", "notify",
        "events",
    }  # fmt: skip
    assert all(port is store for port in ports.values())
