"""The LimitStore port, run against every store: entries survive a reopen, a save replaces,
a clear of nothing is NotFound."""

from __future__ import annotations

from typing import cast

import pytest

from gpuyard.domain.errors import NotFound
from gpuyard.domain.limits import AccountLimits
from gpuyard.services.ports import JobStore
from gpuyard.services.stores import LimitStore
from tests.contract.stores import Backend


def limits(store: JobStore) -> LimitStore:
    return cast(LimitStore, store)


def test_limits_are_saved_replaced_and_cleared(backend: Backend) -> None:
    first = limits(backend.open())
    assert first.load_limits() == []
    alice = AccountLimits("user", "alice", max_gpus=3, updated_at=1.0)
    vision = AccountLimits(
        "team", "vision", max_pending=5, max_gpu_hours=100.5, window_s=86400.0, shares=2.0,
        updated_at=2.0,
    )  # fmt: skip
    first.save_limits(alice)
    first.save_limits(vision)
    first.save_limits(AccountLimits("user", "alice", max_gpus=4, updated_at=3.0))
    backend.close_all()
    second = limits(backend.open())
    assert second.load_limits() == [
        vision, AccountLimits("user", "alice", max_gpus=4, updated_at=3.0)
    ]  # fmt: skip
    second.clear_limits("user", "alice")
    assert second.load_limits() == [vision]
    with pytest.raises(NotFound, match="user alice has no limits set"):
        second.clear_limits("user", "alice")
