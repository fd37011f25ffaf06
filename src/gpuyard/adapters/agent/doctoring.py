"""`gpuyard doctor` on a machine of the server: that machine's facts, gathered there by the
doctor's own function (`doctor/gather.py`) in a child process, as plain JSON data.

A child, not this process: the probes init and shut down NVML and amdsmi, which the agent's
(or one-box server's) telemetry holds open, and a probe that hangs is killed with its child.
`ThisMachineDoctor` is the `MachineDoctor` port of a one-box server (its one machine: the
server's own); on Ray, `adapters/ray/machine_doctor.py` asks each machine's agent.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from gpuyard.services.ports import MachineNotAnswering

GATHER_TIMEOUT_S = 50.0  # under the server's 60 s call: the answer says why, not a timeout
_PROBE_TIMEOUT_S = 40.0  # the framework probe's share of it


def gather_doctor_facts(folder: Path, confinement: str | None) -> dict[str, Any]:
    """This machine's doctor facts (the disk's of `folder`), JSON-ready; raises
    MachineNotAnswering when the gathering fails or takes over GATHER_TIMEOUT_S."""
    package_root = str(Path(__file__).resolve().parents[3])  # where `gpuyard` is imported from
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    argv = [sys.executable, "-m", "gpuyard.doctor.gather", str(folder), "", str(_PROBE_TIMEOUT_S)]
    try:
        done = subprocess.run(
            argv, env=env, capture_output=True, text=True, timeout=GATHER_TIMEOUT_S, check=False,
            cwd="/",
        )  # fmt: skip
    except subprocess.TimeoutExpired as exc:
        raise MachineNotAnswering(f"its doctor took over {GATHER_TIMEOUT_S:.0f} s") from exc
    except OSError as exc:
        raise MachineNotAnswering(f"its doctor could not start: {exc.strerror}") from exc
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        last = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        raise MachineNotAnswering(f"its doctor failed: {last[:300]}")
    facts: dict[str, Any] = json.loads(lines[-1])
    facts["confinement"] = confinement
    return facts


class ThisMachineDoctor:
    """The MachineDoctor of a one-box server: its one machine's facts, gathered by the server."""

    def __init__(self, name: str, folder: Path, confinement: str | None) -> None:
        self._name = name
        self._folder = folder
        self._confinement = confinement

    def doctor_facts(self, name: str) -> dict[str, Any] | None:
        if name != self._name:
            return None
        return gather_doctor_facts(self._folder, self._confinement)
