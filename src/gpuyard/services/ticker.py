"""A service's background thread: call one function over and over, a period apart, until
stopped; an exception in one call is logged and the next call goes on."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable


class Ticker:
    """A daemon thread named ``name`` that calls ``tick`` every ``period()`` seconds (read
    before each wait) from ``start()`` until ``stop()``; a call that raises is logged to
    ``log`` with ``failed`` and the thread goes on."""

    def __init__(
        self,
        name: str,
        tick: Callable[[], object],
        period: Callable[[], float],
        log: logging.Logger,
        failed: str,
    ) -> None:
        self._name = name
        self._tick = tick
        self._period = period
        self._log = log
        self._failed = failed
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10) -> None:
        """Stop the thread, waiting for a call under way up to ``timeout`` seconds."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=timeout)
            self._thread = None

    def _run(self) -> None:
        while not self._stop.wait(self._period()):
            try:
                self._tick()
            except Exception:  # a bad tick must not end the thread
                self._log.exception(self._failed)
