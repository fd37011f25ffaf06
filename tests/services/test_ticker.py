"""The services' background thread: it calls its function a period apart until stopped, and a
call that raises does not end it."""

from __future__ import annotations

import logging
import threading

import pytest

from gpuyard.services.ticker import Ticker


def test_a_failing_tick_is_logged_and_the_next_one_still_runs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    calls: list[int] = []
    third = threading.Event()

    def tick() -> None:
        calls.append(len(calls))
        if len(calls) == 3:
            third.set()
        if len(calls) == 1:
            raise RuntimeError("boom")

    ticker = Ticker("test-ticker", tick, lambda: 0.01, logging.getLogger("test"), "tick failed")
    ticker.start()
    try:
        assert third.wait(10)
    finally:
        ticker.stop()
    count = len(calls)
    assert "tick failed" in caplog.text
    ticker.stop()  # stopping twice is harmless
    assert len(calls) == count  # stopped: no call after stop() returned
