"""The NotifyStore port, run against every store: settings and deliveries survive a reopen, a
save replaces, pending ones are found for a restart, the log is bounded."""

from __future__ import annotations

from dataclasses import replace
from typing import cast

import pytest

from gpuyard.domain.errors import NotFound
from gpuyard.domain.webhooks import Delivery, NotifySettings
from gpuyard.services.ports import JobStore
from gpuyard.services.stores import NotifyStore
from tests.contract.stores import Backend


def notify(store: JobStore) -> NotifyStore:
    return cast(NotifyStore, store)


def delivery(n: int, owner: str = "alice", state: str = "pending", at: float = 0.0) -> Delivery:
    return Delivery(
        f"d{n:04d}", owner, n, "end", f"https://hooks.example.org/{n}?token=t", f"user:{owner}",
        {"id": n, "name": "train", "state": "COMPLETED"}, created_at=at or float(n),
        state=state, next_at=float(n), updated_at=float(n),  # type: ignore[arg-type]
    )  # fmt: skip


def test_settings_are_saved_replaced_and_cleared(backend: Backend) -> None:
    first = notify(backend.open())
    assert first.load_notify_settings() == []
    alice = NotifySettings("user", "alice", ("https://a.example/x",), ("begin", "end"),
                           "whsec_a", 1.0, 1.0)  # fmt: skip
    vision = NotifySettings("team", "vision", ("https://v.example/h",), (), None, 2.0)
    first.save_notify_settings(alice)
    first.save_notify_settings(vision)
    first.save_notify_settings(replace(alice, urls=("https://b.example/y",), updated_at=3.0))
    backend.close_all()
    second = notify(backend.open())
    assert second.load_notify_settings() == [
        vision, replace(alice, urls=("https://b.example/y",), updated_at=3.0)
    ]  # fmt: skip
    second.clear_notify_settings("team", "vision")
    with pytest.raises(NotFound, match="team vision has no notification settings"):
        second.clear_notify_settings("team", "vision")


def test_deliveries_are_kept_replaced_and_the_pending_found_after_a_reopen(
    backend: Backend,
) -> None:
    first = notify(backend.open())
    first.save_deliveries([delivery(1), delivery(2), delivery(3, owner="bob")])
    first.save_deliveries([replace(delivery(1), state="delivered", attempts=2, last_status=200)])
    backend.close_all()
    second = notify(backend.open())
    assert [d.id for d in second.load_pending_deliveries()] == ["d0002", "d0003"]
    mine = second.load_deliveries("alice", 10)
    assert [d.id for d in mine] == ["d0002", "d0001"]  # newest first
    assert mine[1] == replace(delivery(1), state="delivered", attempts=2, last_status=200)
    assert [d.id for d in second.load_deliveries(None, 2)] == ["d0003", "d0002"]


def test_the_log_is_bounded_by_age_and_per_owner_but_keeps_what_is_pending(
    backend: Backend,
) -> None:
    store = notify(backend.open())
    store.save_deliveries([delivery(n, state="delivered") for n in range(1, 11)])
    store.save_deliveries([delivery(11, state="pending", at=0.5)])  # old, still to send
    store.save_deliveries([delivery(12, owner="bob", state="failed")])
    gone = store.prune_deliveries(before=3.0, keep_per_owner=5)
    assert gone == 5  # alice's 1, 2 (old) and 3, 4, 5 (beyond her newest five)
    assert [d.id for d in store.load_deliveries("alice", 100)] == [
        "d0010", "d0009", "d0008", "d0007", "d0006", "d0011"
    ]  # fmt: skip
    assert [d.id for d in store.load_deliveries("bob", 100)] == ["d0012"]
