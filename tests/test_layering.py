"""Layering: the pure core and the CLI's start path stay free of the server's heavy stack.

(Which of gpuyard's own packages may import which: tests/test_import_contract.py.)
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

SERVER_STACK = (
    "fastapi", "sqlalchemy", "pynvml", "ray", "httpx", "uvicorn", "psutil", "prometheus_client",
)  # fmt: skip
CLI_FORBIDDEN = (
    "fastapi", "sqlalchemy", "pydantic", "httpx", "pynvml", "rich", "prometheus_client",
)  # fmt: skip


def loaded_after_import(*modules: str) -> set[str]:
    """Top-level packages in sys.modules after importing `modules` in a fresh interpreter."""
    code = (
        "import importlib, json, sys\n"
        f"for name in {list(modules)!r}:\n"
        "    importlib.import_module(name)\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    return set(json.loads(out.stdout.splitlines()[-1]))


def test_the_probe_sees_heavy_imports() -> None:
    # Guard against a probe that can never fail.
    assert "sqlalchemy" in loaded_after_import("gpuyard.adapters.store.sql")


@pytest.mark.parametrize(
    "module",
    [
        "gpuyard.domain",
        "gpuyard.domain.errors",
        "gpuyard.domain.job",
        "gpuyard.domain.outcome",
        "gpuyard.domain.spec_rules",
        "gpuyard.domain.states",
        "gpuyard.domain.units",
        "gpuyard.doctor.checks",
        "gpuyard.doctor.compat",
        "gpuyard.doctor.model",
        "gpuyard.doctor.probes.driver_facts",  # NVML imported inside, when asked
        "gpuyard.doctor.probes.frameworks",
        "gpuyard.scheduling",
        "gpuyard.scheduling.projection",
        "gpuyard.scheduling.cluster",
        "gpuyard.scheduling.policy",
        "gpuyard.scheduling.policies",  # imports every policy module
        "gpuyard.simulation.engine",
        "gpuyard.simulation.metrics",
        "gpuyard.simulation.replay",
        "gpuyard.simulation.trace",
    ],
)
def test_pure_core_imports_no_server_stack(module: str) -> None:
    loaded = loaded_after_import(module)
    assert "gpuyard" in loaded
    assert loaded.isdisjoint(SERVER_STACK), sorted(loaded & set(SERVER_STACK))


# The hot commands' start path (cli/main.py -> cli/fast.py), the Slurm-named commands' on it
# (cli/slurm_fast.py: squeue, sacct, scancel, sbatch; scontrol, sinfo): the standard
# library's cheapest parts only. Each of these costs it milliseconds (typer + click ~40 ms,
# dataclasses ~10 ms, typing ~3 ms, urllib.parse ~3 ms, http.client's email ~25 ms), against
# a 60 ms budget.
FAST_PATH_MODULES = (
    "gpuyard.cli.main", "gpuyard.cli.fast", "gpuyard.cli.commands", "gpuyard.cli.render",
    "gpuyard.cli.submitting", "gpuyard.client", "gpuyard.cli.slurm_fast",
    "gpuyard.cli.slurm_queries", "gpuyard.cli.slurm_format", "gpuyard.cli.sbatching",
    "gpuyard.cli.scontrol_cmd", "gpuyard.cli.sinfo_cmd", "gpuyard.domain.sbatch",
)  # fmt: skip
FAST_PATH_FORBIDDEN = (
    *CLI_FORBIDDEN, "typer", "click", "typing", "dataclasses", "urllib", "http", "email",
    "pathlib",
)  # fmt: skip


def test_cli_start_path_imports_no_server_stack() -> None:
    loaded = loaded_after_import("gpuyard.cli.app", "gpuyard.client")
    assert "typer" in loaded  # the CLI itself did load
    assert loaded.isdisjoint(CLI_FORBIDDEN), sorted(loaded & set(CLI_FORBIDDEN))


def test_the_hot_commands_start_path_imports_only_the_cheap_stdlib() -> None:
    loaded = loaded_after_import(*FAST_PATH_MODULES)
    assert "gpuyard" in loaded and "json" in loaded  # the probe did load them
    assert loaded.isdisjoint(FAST_PATH_FORBIDDEN), sorted(loaded & set(FAST_PATH_FORBIDDEN))
