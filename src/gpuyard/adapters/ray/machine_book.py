"""The cluster's machines in the order their GPUs are numbered, kept across restarts.

Jobs are recorded with the server's GPU indices. On one box those are the machine's own; on a
cluster they are numbered across machines, and the order of machines must not depend on which
of them are there at a start, or on the order in which they joined: a machine that joined
later, or one that is away at a restart, would move every later machine's GPUs, and a running
job's GPUs would become others'. So the order is written down (`machines.json` in the state
dir, as each machine's name, CPUs, memory and GPUs): a start numbers the machines it knows in
their recorded order, the ones away included (their GPUs keep their numbers, out of service
until they are back), then new ones after them (the server's own first, then by name); a join
adds one at the end.

A machine whose GPU count changed since (a GPU pulled out, which takes a reboot: its jobs
are gone) keeps its place; the machines after it are numbered afresh, and the log says so.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from gpuyard.domain.job import Gpu, NodeCapacity

log = logging.getLogger("gpuyard.machines")

FILE_NAME = "machines.json"


@dataclass(frozen=True, slots=True)
class KnownMachine:
    """A machine as the server last numbered it."""

    node: NodeCapacity
    gpus: tuple[Gpu, ...]

    @property
    def name(self) -> str:
        return self.node.name


class MachineBook:
    """`machines.json`: the machines in numbering order (written whole, atomically)."""

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / FILE_NAME

    def load(self) -> list[KnownMachine]:
        try:
            data = json.loads(self.path.read_text())
            return [
                KnownMachine(NodeCapacity(**m["node"]), tuple(Gpu(**g) for g in m["gpus"]))
                for m in data["machines"]
            ]
        except FileNotFoundError:
            return []
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("%s is unreadable (%s): the machines are numbered afresh", self.path, exc)
            return []

    def save(self, machines: Sequence[KnownMachine]) -> None:
        data = {"machines": [{"node": asdict(m.node), "gpus": [asdict(g) for g in m.gpus]}
                             for m in machines]}  # fmt: skip
        temp = self.path.with_suffix(".tmp")
        with open(temp, "w") as out:
            json.dump(data, out, indent=1)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(temp, 0o600)
        os.replace(temp, self.path)


def numbered(
    known: Sequence[KnownMachine], present: Sequence[KnownMachine]
) -> tuple[list[KnownMachine], list[str]]:
    """Every machine in numbering order with its GPUs numbered, and the names of those away.
    `present`: the machines there now (their GPUs in their own order, any index), new ones in
    the order they are to be numbered in."""
    here = {m.name: m for m in present}
    order: list[KnownMachine] = []
    away: list[str] = []
    for machine in known:
        now = here.get(machine.name)
        if now is None:
            order.append(machine)
            away.append(machine.name)
            continue
        if len(now.gpus) != len(machine.gpus):
            log.warning(
                "machine %s has %d GPU(s), not %d as before: the GPUs of the machines after it "
                "are numbered afresh", machine.name, len(now.gpus), len(machine.gpus),
            )  # fmt: skip
        order.append(now)
    names = {m.name for m in order}
    order += [m for m in present if m.name not in names]
    out: list[KnownMachine] = []
    first = 0
    for machine in order:
        gpus = tuple(
            replace(gpu, index=first + i, node=machine.name) for i, gpu in enumerate(machine.gpus)
        )
        out.append(KnownMachine(machine.node, gpus))
        first += len(gpus)
    return out, away
