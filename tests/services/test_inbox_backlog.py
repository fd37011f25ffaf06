"""A backlog of events (a 10,000-task array arrives in one submit) is fed to the policy in
chunks, the scheduler's lock released between them: the pass that follows decides exactly as
if the whole backlog had been fed in one hold."""

from __future__ import annotations

import pytest

from gpuyard.services.scheduler import live as live_scheduler
from tests.services.test_scheduler_gate_and_estimates import Rig

CHUNK = live_scheduler._INBOX_CHUNK
BACKLOG = 2 * CHUNK + 234  # more than two chunks, and not a multiple of one


@pytest.mark.parametrize("policy", ["fifo", "default"])
def test_a_backlog_fed_in_chunks_decides_as_one_fed_at_once(
    policy: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def run(chunk: int) -> tuple[list[int], list[str], int]:
        monkeypatch.setattr(live_scheduler, "_INBOX_CHUNK", chunk)
        rig = Rig(policy, gpus=4, in_process=True)
        for job_id in range(1, BACKLOG + 1):
            rig.submit(job_id, gpus=1 + job_id % 3)
        holds = rig.scheduler._lock.holds
        started = rig.tick()
        reasons = [rig.scheduler.reason_for(job_id) for job_id in range(1, BACKLOG + 1)]
        return started, reasons, rig.scheduler._lock.holds - holds

    chunked, whole = run(CHUNK), run(10 * BACKLOG)
    assert chunked[:2] == whole[:2]  # the same starts, the same reasons for every job
    assert chunked[0] and set(chunked[1]) - {"None"}
    assert chunked[2] == whole[2] + BACKLOG // CHUNK  # a hold of its own for each chunk
