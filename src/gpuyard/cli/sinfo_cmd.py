"""`gpuyard sinfo` (and `sinfo` by its own name): the server's machines in Slurm's sinfo views.

    PARTITION AVAIL  TIMELIMIT  NODES  STATE NODELIST          the default view
    gpuyard*     up   infinite      1   idle gpu-box

    NODELIST   NODES PARTITION       STATE CPUS    S:C:T MEMORY TMP_DISK WEIGHT AVAIL_FE REASON
                                                                        -N -l (a time line above)

`-o/--format` takes sinfo's %-fields (`%G`: the GPUs as Gres, `gpu:4`), `-h` drops the header,
`-N` one line a node, `-l` the long view, `-p` a partition (only `gpuyard` exists). The one
partition is the server's queue; states are Slurm's words (idle, mixed, allocated, drained)
from the GPUs and CPUs the running jobs hold. Standard library only (the fast start path).
"""

from __future__ import annotations

import sys

from gpuyard.cli.scontrol_cmd import PARTITION, nodes_of
from gpuyard.cli.session import client

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    Node = dict[str, Any]

# sinfo(1)'s formats: the default, -l, -N, -N -l.
DEFAULT = "%9P %.5a %.10l %.6D %.6t %N"
LONG = "%9P %.5a %.10l %.10s %.4r %.8h %.10g %.6D %.11T %N"
NODES = "%10N %.6D %.9P %.6t"
NODES_LONG = "%10N %.6D %.9P %.11T %.4c %.8z %.6m %.8d %.6w %.8f %20E"

# letter -> (header, cell of a group of nodes)
_FIELDS: dict[str, tuple[str, Callable[[list[Node]], str]]] = {
    "P": ("PARTITION", lambda ns: PARTITION + "*"),
    "R": ("PARTITION", lambda ns: PARTITION),
    "a": ("AVAIL", lambda ns: "up"),
    "l": ("TIMELIMIT", lambda ns: "infinite"),
    "s": ("JOB_SIZE", lambda ns: "1-infinite"),
    "r": ("ROOT", lambda ns: "no"),
    "h": ("OVERSUBS", lambda ns: "NO"),
    "g": ("GROUPS", lambda ns: "all"),
    "D": ("NODES", lambda ns: str(len(ns))),
    "t": ("STATE", lambda ns: _short(ns[0]["state"])),
    "T": ("STATE", lambda ns: ns[0]["state"].lower()),
    "N": ("NODELIST", lambda ns: ",".join(n["name"] for n in ns)),
    "n": ("HOSTNAMES", lambda ns: ",".join(n["name"] for n in ns)),
    "c": ("CPUS", lambda ns: str(ns[0]["cpus"])),
    "C": ("CPUS(A/I/O/T)", lambda ns: _cpus_aiot(ns)),
    "z": ("S:C:T", lambda ns: f"1:{ns[0]['cpus']}:1"),
    "m": ("MEMORY", lambda ns: str(ns[0]["mem_mib"])),
    "e": ("FREE_MEM", lambda ns: "N/A"),
    "d": ("TMP_DISK", lambda ns: "0"),
    "w": ("WEIGHT", lambda ns: "1"),
    "f": ("AVAIL_FEATURES", lambda ns: "(null)"),
    "b": ("ACTIVE_FEATURES", lambda ns: "(null)"),
    "G": ("GRES", lambda ns: f"gpu:{ns[0]['gpus']}" if ns[0]["gpus"] else "(null)"),
    "E": ("REASON", lambda ns: ns[0]["reason"] or "none"),
    "O": ("CPU_LOAD", lambda ns: "N/A"),
}
_SHORT = {"IDLE": "idle", "MIXED": "mix", "ALLOCATED": "alloc", "DRAINED": "drain"}


def _short(state: str) -> str:
    return _SHORT.get(state, state.lower())


def _cpus_aiot(nodes: list[Node]) -> str:
    alloc = sum(n["cpus_alloc"] for n in nodes)
    total = sum(n["cpus"] for n in nodes)
    return f"{alloc}/{total - alloc}/0/{total}"


def _usage(message: str) -> int:
    sys.stderr.write(f"sinfo: {message}\n")
    return 1


def sinfo(args: list[str]) -> int:
    """Run one sinfo command line; its exit status."""
    per_node = long = noheader = False
    fmt: str | None = None
    partition: str | None = None
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if arg in ("-N", "--Node"):
            per_node = True
        elif arg in ("-l", "--long"):
            long = True
        elif arg in ("-h", "--noheader"):
            noheader = True
        elif arg in ("-o", "--format", "-p", "--partition"):
            if i >= len(args):
                return _usage(f"option {arg} needs a value")
            value, i = args[i], i + 1
            fmt, partition = (value, partition) if arg in ("-o", "--format") else (fmt, value)
        elif arg.startswith(("--format=", "--partition=")):
            key, _, value = arg.partition("=")
            fmt, partition = (value, partition) if key == "--format" else (fmt, value)
        elif arg.startswith("-o") and len(arg) > 2:
            fmt = arg[2:]
        elif arg in ("-a", "--all", "-e", "--exact", "-r", "--responding", "-s", "--summarize"):
            pass  # one partition, every node responds: the same view
        elif arg == "--help":
            sys.stdout.write("Usage: sinfo [-N] [-l] [-h] [-o FORMAT] [-p PARTITION]\n")
            return 0
        else:
            return _usage(f"unrecognized option '{arg}' (gpuyard's sinfo: -N -l -h -o -p)")
    if fmt is None:
        fmt = (NODES_LONG if long else NODES) if per_node else (LONG if long else DEFAULT)
    nodes = [] if partition not in (None, PARTITION) else nodes_of(client())
    if per_node:
        groups = [[node] for node in nodes]
    else:  # one line a state, as sinfo groups the nodes of a partition
        by_state: dict[str, list[Node]] = {}
        for node in nodes:
            by_state.setdefault(node["state"], []).append(node)
        groups = list(by_state.values())
    text = render(fmt, groups, header=not noheader)
    if long:
        import time

        sys.stdout.write(time.strftime("%a %b %d %H:%M:%S %Y") + "\n")
    if text:
        sys.stdout.write(text + "\n")
    return 0


def render(fmt: str, groups: list[list[Node]], header: bool = True) -> str:
    """Rows in sinfo's `--format` language (`%.6D` right-justified in 6, `%9P` left in 9)."""
    import re

    parts = re.split(r"(%\.?\d*[A-Za-z])", fmt)
    rows: list[list[str]] = []
    if header:
        rows.append([_cell(p, None) for p in parts])
    rows += [[_cell(p, group) for p in parts] for group in groups]
    return "\n".join("".join(row).rstrip() for row in rows)


def _cell(part: str, group: list[Node] | None) -> str:
    import re

    spec = re.fullmatch(r"%(\.?)(\d*)([A-Za-z])", part)
    if spec is None:
        return part
    right, width, letter = spec.groups()
    title, cell = _FIELDS.get(letter, (letter, lambda ns: "N/A"))
    text = title if group is None else str(cell(group))
    if width:
        text = text[: int(width)]
        text = text.rjust(int(width)) if right else text.ljust(int(width))
    return text


def register(app: Any, admin: Any) -> None:
    """`gpuyard sinfo ...`, listed by typer; its words are read here, not by typer."""
    from gpuyard.cli.cmd_common import raw_command

    raw_command(
        app,
        "sinfo",
        sinfo,
        "Slurm's sinfo: the machines, their state, CPUs, memory and GPUs (-N -l, -o %G).",
    )
