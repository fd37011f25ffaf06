"""The GpuHistoryStore port, run against every store: buckets survive a reopen and come back
by GPU and time window, oldest first; a bucket saved again replaces the first; pruning drops
what is older than the retention, every GPU's."""

from __future__ import annotations

from typing import cast

from gpuyard.services.ports import JobStore
from gpuyard.services.stores import GpuBucket, GpuHistoryStore
from tests.contract.stores import Backend

GPU0, GPU1 = "GPU-00000000-aaaa", "GPU-11111111-bbbb"


def history(store: JobStore) -> GpuHistoryStore:
    return cast(GpuHistoryStore, store)


def bucket(
    uuid: str, at: float, util: float | None = 50.0, holders: tuple[int, ...] = ()
) -> GpuBucket:
    return GpuBucket(
        uuid, at, 60, util, None if util is None else util + 10, 1000.5, 2000.0, 65.0, 250.25,
        holders,
    )  # fmt: skip


def test_buckets_survive_a_reopen_and_load_by_gpu_and_window(backend: Backend) -> None:
    first = history(backend.open())
    assert first.load_gpu_buckets(GPU0, 0, 1e12) == []
    saved = [bucket(GPU0, 1_700_000_000 + 60 * i, holders=(7, 12)) for i in range(5)]
    first.save_gpu_buckets([*reversed(saved), bucket(GPU1, 1_700_000_060, util=None)])
    first.save_gpu_buckets([])
    backend.close_all()
    second = history(backend.open())
    assert second.load_gpu_buckets(GPU0, 0, 1e12) == saved
    assert second.load_gpu_buckets(GPU0, 1_700_000_060, 1_700_000_180) == saved[1:3]
    assert second.load_gpu_buckets(GPU1, 0, 1e12) == [bucket(GPU1, 1_700_000_060, util=None)]
    assert second.load_gpu_buckets("GPU-unknown", 0, 1e12) == []


def test_a_bucket_saved_again_replaces_the_first(store: JobStore) -> None:
    port = history(store)
    port.save_gpu_buckets([bucket(GPU0, 1_700_000_000, util=10.0, holders=(1,))])
    port.save_gpu_buckets([bucket(GPU0, 1_700_000_000, util=90.0, holders=(1, 2))])
    assert port.load_gpu_buckets(GPU0, 0, 1e12) == [
        bucket(GPU0, 1_700_000_000, util=90.0, holders=(1, 2))
    ]


def test_prune_drops_every_gpus_old_buckets(store: JobStore) -> None:
    port = history(store)
    port.save_gpu_buckets([bucket(u, 1000.0 + 60 * i) for u in (GPU0, GPU1) for i in range(4)])
    assert port.prune_gpu_buckets(before=1120.0) == 4
    assert [b.at for b in port.load_gpu_buckets(GPU0, 0, 1e12)] == [1120.0, 1180.0]
    assert [b.at for b in port.load_gpu_buckets(GPU1, 0, 1e12)] == [1120.0, 1180.0]
    assert port.prune_gpu_buckets(before=1120.0) == 0
