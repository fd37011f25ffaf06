"""The services' shared fixture: live rigs (the server's own wiring, in simulated time)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import pytest

from gpuyard.scheduling.policies import make_policy
from gpuyard.settings import Settings

if TYPE_CHECKING:  # imported when a rig is made: a broken wiring fails only the rigs' tests
    from tests.services.live_harness import LiveRig


class MakeRig(Protocol):
    """Builds a live rig on the test's folder: a policy by name, a GPU count, the settings."""

    def __call__(
        self, policy: str = "fifo", *, gpus: int, settings: Settings | None = None
    ) -> LiveRig: ...


@pytest.fixture
def live_rig(tmp_path: Path) -> Iterator[MakeRig]:
    """Makes live rigs on `tmp_path` (one database: a second is a restarted server) and closes
    every rig it made when the test ends."""
    from tests.services.live_harness import LiveRig

    made: list[LiveRig] = []

    def make(policy: str = "fifo", *, gpus: int, settings: Settings | None = None) -> LiveRig:
        rig = LiveRig(tmp_path, make_policy(policy, for_server=True), gpus, settings=settings)
        made.append(rig)
        return rig

    yield make
    for rig in made:
        rig.close()
