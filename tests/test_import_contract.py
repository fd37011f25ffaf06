"""The import contract: which of gpuyard's own packages may import which (ARCHITECTURE.md).

A small AST walk over `src/gpuyard` (every `import`, also inside functions and TYPE_CHECKING
blocks: a lazy import is still a dependency). Each part lists what it may import; anything else
fails, naming the module and the import. (Third-party imports: tests/test_layering.py.)

    domain <- scheduling <- simulation          pure, the same code live and simulated
    domain <- services (+ scheduling)           use cases; ports that adapters implement
    services.ports <- adapters                  implement ports, call no use case
    services, schemas <- api                    never the wiring (bootstrap) or an adapter
    client, doctor <- cli                       HTTP through the client; local tools aside
    sdk <- client                               typed records, function jobs (schemas lazily)
    everything <- bootstrap                     the one place that wires

Inside services, rooms (ROOMS), each importing only the rooms before it and the top plumbing:

    ports, stores, metrics, ticker, store_calls, store_hold top plumbing: imports no room
      <- launch <- scheduler <- access <- jobs <- machine <- workflows
      <- server                                 ServerFacade: every room

And no import cycle anywhere in src/gpuyard, module by module nor room by room.
"""

from __future__ import annotations

import ast
import itertools
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "gpuyard"

# What each part may import (module prefixes; a part always may import itself).
MAY_IMPORT: dict[str, tuple[str, ...]] = {
    "domain": (),
    "scheduling": ("gpuyard.domain",),
    "simulation": ("gpuyard.domain", "gpuyard.scheduling"),
    "doctor": ("gpuyard.domain",),
    "jobhooks": (),
    "services": ("gpuyard.domain", "gpuyard.scheduling", "gpuyard.jobhooks", "gpuyard.locations"),
    "adapters": ("gpuyard.domain", "gpuyard.services.ports", "gpuyard.services.stores",
                 "gpuyard.settings"),
    "schemas": ("gpuyard.domain",),
    "api": ("gpuyard.domain", "gpuyard.scheduling", "gpuyard.services", "gpuyard.schemas",
            "gpuyard.settings"),
    "cli": ("gpuyard.domain", "gpuyard.client", "gpuyard._http", "gpuyard.settings",
            "gpuyard.locations", "gpuyard.doctor"),
    "client": ("gpuyard.domain", "gpuyard._http", "gpuyard._connection", "gpuyard._retry",
               "gpuyard.locations", "gpuyard.sdk"),
    # The SDK's typed records and function jobs; JobOut only in `Job.to_schema()` (lazily).
    "sdk": ("gpuyard.domain", "gpuyard.schemas"),
    "_connection": ("gpuyard.domain", "gpuyard._http", "gpuyard.locations"),
    "_http": (),
    "_retry": ("gpuyard.domain",),  # when a call is sent again: one policy, CLI and SDK
    "locations": (),
    "settings": ("gpuyard.locations",),
    "gpuyard": ("gpuyard._progress",),  # __init__: `__version__`, `progress` (the job's SDK)
    "_progress": (),  # `gpuyard.progress()`, run inside jobs: stdlib only
    "bootstrap": ("gpuyard",),  # the composition root wires everything
}  # fmt: skip

# Single modules allowed more than their part, each with why.
EXCEPTIONS: dict[str, dict[str, str]] = {
    "gpuyard.cli.serving": {
        "gpuyard.bootstrap": "`gpuyard server` runs the server in this process: one call, serve()",
    },
    "gpuyard.cli.simulating": {
        "gpuyard.simulation": "`gpuyard simulate` replays a trace in-process, a local tool",
        "gpuyard.scheduling": "`gpuyard simulate` names the policies it replays",
    },
}

# Known violations being removed by work in progress, each with the change that removes it;
# delete an entry once its import is gone (the test below then says so, as a skip). Empty: the
# seams review's two (api/app.py -> bootstrap, adapters/ray/executor.py -> services.launch) are
# gone: the API is typed by services/server.py, the Ray executor takes the LaunchPlan.
KNOWN_VIOLATIONS_BEING_REMOVED: dict[tuple[str, str], str] = {}

# The rooms of `gpuyard.services`, low -> high: a room's modules are `gpuyard.services.<room>.*`;
# each room lists the rooms it may import (only rooms before it), and why it sits where it does.
# Every room may also import domain, scheduling, jobhooks (MAY_IMPORT) and the top plumbing.
ROOMS: dict[str, tuple[tuple[str, ...], str]] = {
    "launch": ((), "what process a job runs, as whom: no job state"),
    "scheduler": (("launch",), "the live pass: hears of jobs as events, never imports jobs/"),
    "access": (("launch", "scheduler"),
               "who is acting: quota and share rules swapped into the scheduler"),
    "jobs": (("launch", "scheduler", "access"), "a job's life and the use cases on it"),
    "machine": (("launch", "scheduler", "access", "jobs"),
                "the GPUs as the server sees them: hears of jobs through observers, book reads"),
    "workflows": (("launch", "scheduler", "access", "jobs", "machine"),
                  "sweeps, progress, notifications over jobs"),
}  # fmt: skip

# The top modules of `gpuyard.services` besides the rooms: plumbing every room may import, itself
# importing no room; and the facade, which imports every room.
TOP_PLUMBING: dict[str, str] = {
    "ports": "the protocols adapters implement",
    "stores": "the stores a server is built with: one Protocol per durable record, and the bundle",
    "metrics": "the queue's counters",
    "ticker": "a periodic thread",
    "store_calls": "the request path's store calls: off the event loop, with a deadline",
    "store_hold": "whether the server may write its database, and taking it back",
}
FACADE = "server"  # ServerFacade: what the API serves, over every room

SERVICES = "gpuyard.services"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def all_modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


MODULES = all_modules()


def gpuyard_imports(name: str, path: Path) -> set[str]:
    """The gpuyard modules (or names) `name` imports, relative imports resolved."""
    found: set[str] = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if _ours(a.name))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            if not _ours(base):
                continue
            for alias in node.names:  # `from gpuyard.x import y`: y may be a module
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base)
    return found


def _ours(module: str) -> bool:
    return module == "gpuyard" or module.startswith("gpuyard.")


def part_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "gpuyard"


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def allowed(importer: str, target: str) -> bool:
    part = part_of(importer)
    if target == "gpuyard" or part_of(target) == part:
        return True  # the root package holds only `__version__` (checked below)
    prefixes = (*MAY_IMPORT[part], *EXCEPTIONS.get(importer, {}))
    return any(_within(target, p) for p in prefixes)


def violations() -> list[tuple[str, str]]:
    found = []
    for name, path in MODULES.items():
        for target in sorted(gpuyard_imports(name, path)):
            if not allowed(name, target):
                found.append((name, target))
    return found


def test_the_walk_sees_imports() -> None:
    # Guard: a walk that finds nothing would pass every rule.
    assert "gpuyard.adapters.executor.local" in gpuyard_imports(
        "gpuyard.bootstrap.server", MODULES["gpuyard.bootstrap.server"]
    )
    assert "gpuyard.domain.errors" in gpuyard_imports("gpuyard.client", MODULES["gpuyard.client"])
    assert not allowed("gpuyard.api.app", "gpuyard.bootstrap")
    assert not allowed("gpuyard.adapters.ray.executor", "gpuyard.services.launch.plan")
    assert allowed("gpuyard.adapters.ray.executor", "gpuyard.services.ports")


def test_every_part_is_in_the_contract() -> None:
    assert {part_of(m) for m in MODULES} <= set(MAY_IMPORT)
    # The root imports only the job-side progress SDK (stdlib only, itself importing nothing).
    assert gpuyard_imports("gpuyard", MODULES["gpuyard"]) <= {"gpuyard._progress"}
    assert not gpuyard_imports("gpuyard._progress", MODULES["gpuyard._progress"])


def test_every_import_follows_the_layering() -> None:
    broken = [v for v in violations() if v not in KNOWN_VIOLATIONS_BEING_REMOVED]
    assert not broken, "imports against the layering:\n" + "\n".join(
        f"  {importer} imports {target}" for importer, target in broken
    )


def test_known_violations_are_still_there() -> None:
    gone = set(KNOWN_VIOLATIONS_BEING_REMOVED) - set(violations())
    if gone:
        pytest.skip(f"gone, delete from KNOWN_VIOLATIONS_BEING_REMOVED: {sorted(gone)}")


def room_of(module: str) -> str | None:
    """The room (or top module) of `gpuyard.services` a module is in; None outside services."""
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and _within(module, SERVICES) else None


def room_allowed(importer: str, target: str) -> bool:
    """May `importer` (a module of a room or a top module) import `target` (in services)?"""
    mine, theirs = room_of(importer), room_of(target)
    if mine == FACADE or theirs is None or theirs == mine:
        return True  # the facade imports everything; `gpuyard.services` is a docstring
    if theirs in TOP_PLUMBING:
        return True
    return mine in ROOMS and theirs in ROOMS[mine][0]


def room_violations() -> list[tuple[str, str]]:
    return [
        (name, target)
        for name, path in MODULES.items()
        if room_of(name) is not None
        for target in sorted(gpuyard_imports(name, path))
        if _within(target, SERVICES) and not room_allowed(name, target)
    ]


def import_graph() -> dict[str, set[str]]:
    """Module -> the gpuyard modules it imports (lazy and TYPE_CHECKING imports too)."""
    return {
        name: {t for t in gpuyard_imports(name, path) if t in MODULES and t != name}
        for name, path in MODULES.items()
    }


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per back edge of a depth-first walk, as the chain of nodes (first == last).

    Removing every back edge found leaves the graph without a cycle, so this lists what to fix.
    """
    found: list[list[str]] = []
    done: set[str] = set()
    path: list[str] = []
    on_path: dict[str, int] = {}

    def walk(node: str) -> None:
        on_path[node] = len(path)
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt in on_path:
                found.append([*path[on_path[nxt] :], nxt])
            elif nxt not in done:
                walk(nxt)
        path.pop()
        del on_path[node]
        done.add(node)

    for node in sorted(graph):
        if node not in done:
            walk(node)
    return found


def room_graph() -> dict[str, dict[str, tuple[str, str]]]:
    """Room -> the rooms its modules import, each with one import that does it."""
    graph: dict[str, dict[str, tuple[str, str]]] = {room: {} for room in ROOMS}
    for name, targets in import_graph().items():
        mine = room_of(name)
        for target in sorted(targets):
            theirs = room_of(target)
            if mine in ROOMS and theirs in ROOMS and theirs != mine:
                graph[mine].setdefault(theirs, (name, target))
    return graph


def test_the_rooms_table_is_low_to_high() -> None:
    # Each room may import only rooms listed before it: the table itself has no cycle.
    order = list(ROOMS)
    for room, (may, why) in ROOMS.items():
        assert why and set(may) <= set(order[: order.index(room)]), room
    assert not set(ROOMS) & {*TOP_PLUMBING, FACADE}


def test_every_services_module_is_in_a_room() -> None:
    rooms = {room_of(m) for m in MODULES if room_of(m) is not None}
    unknown = rooms - {*ROOMS, *TOP_PLUMBING, FACADE}
    assert not unknown, f"modules of gpuyard.services in no room: {sorted(unknown)}"
    for room in ROOMS:  # each room is a package, not a module of the same name
        assert f"{SERVICES}.{room}" in MODULES and MODULES[f"{SERVICES}.{room}"].name == (
            "__init__.py"
        ), room


def test_the_room_check_sees_imports() -> None:
    # Guard: the rooms as the moves left them, so a check that allows everything fails here.
    assert not room_allowed("gpuyard.services.scheduler.live", "gpuyard.services.jobs.book")
    assert not room_allowed("gpuyard.services.jobs.observers", "gpuyard.services.machine.idle")
    assert not room_allowed("gpuyard.services.ports", "gpuyard.services.launch.plan")
    assert not room_allowed("gpuyard.services.workflows.sweeps", "gpuyard.services.server")
    assert room_allowed("gpuyard.services.jobs.controller", "gpuyard.services.scheduler.live")
    assert room_allowed("gpuyard.services.launch.plan", "gpuyard.services.ports")
    assert room_allowed("gpuyard.services.server", "gpuyard.services.workflows.sweeps")
    assert "gpuyard.services.scheduler.live" in import_graph()["gpuyard.services.jobs.controller"]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set()}) == [["a", "b", "c", "a"]]


def test_every_room_imports_only_rooms_below_it() -> None:
    broken = room_violations()
    assert not broken, "imports against the rooms (ROOMS: low -> high):\n" + "\n".join(
        f"  {importer} imports {target}"
        + (f"  ({room_of(importer)}: {ROOMS[r][1]})" if (r := room_of(importer)) in ROOMS else "")
        for importer, target in broken
    )


def test_no_room_imports_a_room_that_imports_it() -> None:
    graph = room_graph()
    loops = cycles({room: set(targets) for room, targets in graph.items()})
    assert not loops, "rooms importing each other:\n" + "\n".join(
        "  "
        + " -> ".join(loop)
        + "\n"
        + "\n".join(
            f"      {graph[a][b][0]} imports {graph[a][b][1]}" for a, b in itertools.pairwise(loop)
        )
        for loop in loops
    )


def test_no_import_cycle_anywhere() -> None:
    loops = cycles(import_graph())
    assert not loops, f"{len(loops)} import cycles in src/gpuyard:\n" + "\n".join(
        "  " + " -> ".join(loop) for loop in loops
    )
