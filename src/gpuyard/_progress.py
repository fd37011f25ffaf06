"""`gpuyard.progress(step, total=None, **metrics)`: a job reports how far it got.

Cheap and harmless by design, since it runs inside a user's training loop:
- outside gpuyard (no `GPUYARD_PROGRESS_FILE`) it is a no-op: one dict lookup;
- a call only appends to an in-memory buffer under a lock; a daemon thread writes at most one
  JSON line per `FLUSH_S` to the file the server reads (and once more at exit), so a loop that
  reports every step costs no I/O per step;
- it never raises into the job: values that are not finite numbers are dropped (a torch or
  numpy scalar is turned into a float), and a file that cannot be written costs one warning
  line on stderr, then silence.

One line per flush: `{"t": <epoch s of the last call>, "step": int, "total": int|null,
"metrics": {name: mean of the values reported since the last line}}`. Standard library only
(`import gpuyard` stays cheap: threading and json are imported at the first report).
"""

from __future__ import annotations

import os
import sys
import time

ENV_VAR = "GPUYARD_PROGRESS_FILE"
FLUSH_S = 1.0
MAX_METRICS = 64  # names kept per line; more are dropped (the server keeps as many)
MAX_NAME_CHARS = 64

_reporter: _Reporter | None = None
_off = False  # decided at the first call: no variable, nothing to do ever


def progress(step: int, total: int | None = None, **metrics: float) -> None:
    """Report that the job reached `step` (of `total`, when known), with metrics such as
    `loss=0.31`. Non-blocking; a no-op outside gpuyard; never raises."""
    global _reporter, _off
    if _off:
        return
    try:
        reporter = _reporter
        if reporter is None:
            path = os.environ.get(ENV_VAR)
            if not path:
                _off = True
                return
            reporter = _reporter = _Reporter(path)
        reporter.add(step, total, metrics)
    except Exception:  # never into the job
        pass


def _forget_in_child() -> None:
    global _reporter
    _reporter = None


def _number(value: object) -> float | None:
    """A finite float from an int, float, or a 0-d tensor/array (anything float() takes that is
    not a string or a bool); None otherwise."""
    if isinstance(value, (str, bytes, bool)) or value is None:
        return None
    try:
        number = float(value)  # type: ignore[arg-type]
    except Exception:
        return None
    return number if number - number == 0.0 else None  # NaN and infinities fail this


def _step(value: object) -> int | None:
    number = _number(value)
    if number is None or number < 0 or number != int(number):
        return None
    return int(number)


class _Reporter:
    """The buffer and its writer thread (started at the first report)."""

    def __init__(self, path: str) -> None:
        import atexit
        import threading

        self._path = path
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._step: int | None = None
        self._total: int | None = None
        self._at = 0.0
        self._sums: dict[str, float] = {}
        self._counts: dict[str, int] = {}
        self._dirty = False
        self._warned = False
        self._thread = threading.Thread(target=self._run, name="gpuyard-progress", daemon=True)
        self._thread.start()
        atexit.register(self.flush)
        # A forked child (a DataLoader worker) has no writer thread and may inherit the lock
        # held: it starts its own reporter at its first report instead.
        os.register_at_fork(after_in_child=_forget_in_child)

    def add(self, step: object, total: object, metrics: dict[str, float]) -> None:
        whole = _step(step)
        if whole is None:
            return  # no usable step: the report is dropped, metrics too
        of = _step(total) if total is not None else None
        values = []
        for name, value in metrics.items():
            number = _number(value)
            if number is not None and len(name) <= MAX_NAME_CHARS:
                values.append((name, number))
        with self._lock:
            self._step, self._total, self._at = whole, of, time.time()
            for name, number in values:
                if name in self._sums or len(self._sums) < MAX_METRICS:
                    self._sums[name] = self._sums.get(name, 0.0) + number
                    self._counts[name] = self._counts.get(name, 0) + 1
            self._dirty = True

    def _run(self) -> None:
        while True:
            self._wake.wait(FLUSH_S)
            self.flush()

    def flush(self) -> None:
        """Write what was reported since the last line, if anything (thread and atexit)."""
        import json

        if os.getpid() != self._pid:
            return  # the parent's reporter, inherited by a fork (its lock may be held)
        with self._lock:
            if not self._dirty:
                return
            means = {name: total / self._counts[name] for name, total in self._sums.items()}
            record = {"t": self._at, "step": self._step, "total": self._total, "metrics": means}
            self._sums, self._counts, self._dirty = {}, {}, False
        line = json.dumps(record, separators=(",", ":")) + "\n"
        try:
            fd = os.open(self._path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                os.write(fd, line.encode())
            finally:
                os.close(fd)
        except Exception as exc:
            if not self._warned:
                self._warned = True
                try:
                    sys.stderr.write(f"gpuyard: progress not recorded ({ENV_VAR}): {exc}\n")
                except Exception:
                    pass
