"""One machine's facts, gathered on that machine: the one function `gpuyard doctor` (the CLI's
machine, in its own process) and every machine's agent (`adapters/agent/doctoring.py`, for
`gpuyard doctor --node/--all`) use.

The agent runs it as a child (`python -m gpuyard.doctor.gather FOLDER [PYTHON]`, JSON on
stdout): a driver library's init and shutdown then never touch the agent's own telemetry, and
a probe that hangs is killed with its child, not left in the agent.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

from gpuyard.doctor.model import DiskFacts, Facts
from gpuyard.doctor.probes.amd_facts import read_rocm_facts
from gpuyard.doctor.probes.driver_facts import read_driver_facts
from gpuyard.doctor.probes.frameworks import PROBE_TIMEOUT_S, probe_python
from gpuyard.doctor.wire import facts_to_json


def machine_facts(
    folder: Path, python: str | None = None, *, probe_timeout_s: float = PROBE_TIMEOUT_S
) -> Facts:
    """This machine's driver (NVML), ROCm (amdsmi), the job Python's frameworks (`python`,
    else python3 on PATH, else this interpreter) and the free disk where `folder` is."""
    executable = python or shutil.which("python3") or sys.executable
    return Facts(
        driver=read_driver_facts(),
        python=probe_python(executable, timeout_s=probe_timeout_s),
        disk=disk_facts(folder),
        rocm=read_rocm_facts(),
    )


def disk_facts(state_dir: Path) -> DiskFacts:
    """Free space where the state dir is (or will be made: its nearest existing parent)."""
    path = state_dir.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    try:
        stat = os.statvfs(path)
    except OSError as exc:
        return DiskFacts(str(state_dir), error=exc.strerror or str(exc))
    return DiskFacts(
        path=str(state_dir),
        free_bytes=stat.f_bavail * stat.f_frsize,
        total_bytes=stat.f_blocks * stat.f_frsize,
        writable=os.access(path, os.W_OK),
    )


def main(argv: list[str]) -> int:
    """`FOLDER [PYTHON] [PROBE_TIMEOUT_S]`: the facts as one JSON line."""
    folder, python = Path(argv[0]), (argv[1] if len(argv) > 1 and argv[1] else None)
    timeout_s = float(argv[2]) if len(argv) > 2 else PROBE_TIMEOUT_S
    facts = machine_facts(folder, python, probe_timeout_s=timeout_s)
    sys.stdout.write(json.dumps(facts_to_json(facts)) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
