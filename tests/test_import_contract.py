"""The import contract: which of gpuyard's own packages may import which (ARCHITECTURE.md).

A small AST walk over `src/gpuyard` (every `import`, also inside functions and TYPE_CHECKING
blocks: a lazy import is still a dependency). Each part lists what it may import; anything else
fails, naming the module and the import. (Third-party imports: tests/test_layering.py.)

    domain <- scheduling <- simulation          pure, the same code live and simulated
    domain <- services (+ scheduling)           use cases; ports that adapters implement
    services.ports <- adapters                  implement ports, call no use case
    services, schemas <- api                    never the wiring (bootstrap) or an adapter
    client, doctor <- cli                       HTTP through the client; local tools aside
    everything <- bootstrap                     the one place that wires
"""

from __future__ import annotations

import ast
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
    "services": ("gpuyard.domain", "gpuyard.scheduling", "gpuyard.jobhooks", "gpuyard.settings"),
    "adapters": ("gpuyard.domain", "gpuyard.services.ports", "gpuyard.settings"),
    "schemas": ("gpuyard.domain",),
    "api": ("gpuyard.domain", "gpuyard.scheduling", "gpuyard.services", "gpuyard.schemas",
            "gpuyard.settings"),
    "cli": ("gpuyard.domain", "gpuyard.client", "gpuyard._http", "gpuyard.settings",
            "gpuyard.locations", "gpuyard.doctor"),
    "client": ("gpuyard.domain", "gpuyard._http", "gpuyard.locations"),
    "_http": (),
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
        "gpuyard.bootstrap", MODULES["gpuyard.bootstrap"]
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
