"""The group-commit writer outlives a caller that stops waiting for its write."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

from gpuyard.adapters.store.group_commit import GroupCommitWriter


def test_a_cancelled_wait_does_not_stop_the_writer() -> None:
    commits: list[list[str]] = []
    release = threading.Event()

    def commit(items: Sequence[str]) -> None:
        commits.append(list(items))
        if items == ["plug"]:
            release.wait(5)  # hold the writer while the next write queues up

    writer: GroupCommitWriter[str] = GroupCommitWriter(commit)
    try:
        writer.submit_future("plug")
        while not commits:
            time.sleep(0.001)
        abandoned = writer.submit_future("abandoned")
        assert abandoned.cancel()  # e.g. its request was cancelled; the write still happens
        release.set()
        writer.submit_future("next").result(5)  # the writer is still there
    finally:
        writer.close()
    assert [item for batch in commits for item in batch] == ["plug", "abandoned", "next"]
