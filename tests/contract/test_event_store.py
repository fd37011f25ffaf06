"""The EventStore port on every store: the events page's events read back after a reopen, the
newest `limit` oldest first, pruned below an id, an id saved again replaced."""

from __future__ import annotations

from typing import cast

from gpuyard.services.stores import Event, EventStore
from tests.contract.stores import Backend


def test_events_are_read_back_after_a_reopen_newest_kept_and_pruned(backend: Backend) -> None:
    store = cast(EventStore, backend.open())
    assert store.load_events(10) == []
    drained = Event(1, 1_700_000_000.5, "drain", "GPU 0 drained by root: fan ü", gpu=0)
    oom = Event(2, 1_700_000_001.0, "oom_kill", "job 7 (train, ada) was ended", 7, "ada", "train")
    store.save_events([drained, oom])
    store.save_events([Event(3, 1_700_000_002.0, "resume", "GPU 0 resumed", gpu=0)])
    backend.close_all()

    store = cast(EventStore, backend.open())
    assert store.load_events(10) == [drained, oom, Event(3, 1_700_000_002.0, "resume",
                                                        "GPU 0 resumed", gpu=0)]  # fmt: skip
    assert [e.id for e in store.load_events(2)] == [2, 3]
    assert store.prune_events(3) == 2
    assert [e.id for e in store.load_events(10)] == [3]
    store.save_events([Event(3, 5.0, "hot", "GPU 1 placed last: 90 C", gpu=1)])
    assert store.load_events(10) == [Event(3, 5.0, "hot", "GPU 1 placed last: 90 C", gpu=1)]
