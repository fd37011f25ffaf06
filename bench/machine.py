"""What a bench ran on, in its JSON beside its figures (issue 27): the same bench gave 3,811
submits/s where its figures were first taken and 556 on a fresh clone elsewhere, and nothing
in the JSON said which machine was which. A figure travels with:

- the CPU (model, cores, the cores this process may use), the kernel, Python's version;
- two reference figures measured in the same run, so a reader can scale between machines:
  `python -c pass` (a process start, what every CLI verb pays first: byte-code caching, the
  disk, the CPU) and a fixed pure-Python loop (the interpreter's speed alone);
- the load average when the bench began (a loaded machine is not a quiet one), root or not,
  the environment that changes Python's speed (byte-code caching off), and the backend.

    from machine import with_machine      # bench/ is on sys.path (the script's folder)
    print(json.dumps(with_machine(result)))  # "machine": the record, taken at the import

The reference figures and the load average are taken when this module is imported, i.e. when
the bench starts, before it loads the machine.

Standard library only.
"""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

# A bench's servers (started by root) never take the machine's Unix socket
# (/run/gpuyard/gpuyard.sock): the machine's own server, or a later one, keeps it, and local
# users never reach a bench's throw-away server. A bench that measures a socket names its own
# (`bench/cli.py --socket PATH`). Set here, at the import every bench makes, before any server.
os.environ.setdefault("GPUYARD_SOCKET", "off")

# Environment variables that change how fast Python starts or runs.
_SPEED_ENV = (
    "PYTHONDONTWRITEBYTECODE",
    "PYTHONPYCACHEPREFIX",
    "PYTHONOPTIMIZE",
    "PYTHONDEVMODE",
    "PYTHONMALLOC",
    "PYTHONPROFILEIMPORTTIME",
    "PYTHONNODEBUGRANGES",
)
_LOOP_N = 1_000_000


def cpu_model() -> str:
    """The CPU's marketing name (/proc/cpuinfo), or the architecture when none is given."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def python_start_ms(runs: int = 7) -> float:
    """Median wall time of `python -c pass` with this interpreter, in ms."""
    times = []
    for _ in range(runs):
        began = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        times.append((time.perf_counter() - began) * 1000)
    return round(statistics.median(times), 1)


def python_loop_ms(runs: int = 5) -> float:
    """Best of `runs` of a fixed pure-Python loop (a million additions and multiplies), in ms:
    the interpreter's own speed, which no cache or disk changes."""
    best = float("inf")
    for _ in range(runs):
        began = time.perf_counter()
        total = 0
        for i in range(_LOOP_N):
            total += i * i
        best = min(best, time.perf_counter() - began)
    return round(best * 1000, 1)


def machine_record(backend: str | None = "local") -> dict[str, Any]:
    """This machine and its reference figures, measured now (~1 s)."""
    return {
        "cpu_model": cpu_model(),
        "cpus": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "python_c_pass_ms": python_start_ms(),
        "python_loop_ms": python_loop_ms(),
        "loadavg_1m_at_start": round(os.getloadavg()[0], 2),
        "root": os.geteuid() == 0,
        "bytecode_caching": not sys.dont_write_bytecode,
        "speed_env": {k: os.environ[k] for k in _SPEED_ENV if k in os.environ},
        "backend": backend,
    }


AT_START = machine_record(backend=None)  # the bench's start: before it loads the machine


def with_machine(result: dict[str, Any], backend: str = "local") -> dict[str, Any]:
    """`result` with "machine": the record taken at the bench's start, and its backend."""
    return {**result, "machine": {**AT_START, "backend": backend}}


def reference_line(record: dict[str, Any]) -> str:
    """The record in one line, for a bench's human-readable output."""
    caching = "on" if record["bytecode_caching"] else "OFF"
    return (
        f"machine: {record['cpu_model']}, {record['cpus_usable']}/{record['cpus']} cores, "
        f"load {record['loadavg_1m_at_start']}, python -c pass {record['python_c_pass_ms']} ms, "
        f"loop {record['python_loop_ms']} ms, byte-code caching {caching}"
        f"{', root' if record['root'] else ''}, backend {record['backend']}"
    )


if __name__ == "__main__":
    import json

    print(json.dumps(AT_START))
