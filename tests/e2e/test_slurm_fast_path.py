"""The Slurm-named commands answer the same on the fast start path as through typer, without
importing typer for their usual lines (issues 24, 27), against a real server.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.server import GPUYARD, ServerProcess, wait_ended

# `gpuyard ARGS` as typer alone runs it: what every Slurm-named command did before.
TYPER_PATH = "import sys; from gpuyard.cli.app import app; sys.argv[0] = 'gpuyard'; app()"


def _run(server: ServerProcess, argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """`argv` run from `cwd` (sbatch's `slurm-N.out` lands there, not in the checkout)."""
    return subprocess.run(argv, capture_output=True, text=True, env=server.cli_env(),
                          cwd=cwd, timeout=60, check=False)  # fmt: skip


def _typer_imported(server: ServerProcess, args: list[str], cwd: Path) -> bool:
    """Whether `gpuyard ARGS` imported typer (`-X importtime` lists every module)."""
    done = _run(server, [sys.executable, "-X", "importtime", GPUYARD, *args], cwd)
    return any(line.split("|")[-1].strip() == "typer" for line in done.stderr.splitlines())


@pytest.fixture
def jobs(server: ServerProcess, tmp_path: Path) -> dict[str, str]:
    """Two held jobs (pending, their lines do not change with time) and one ended."""
    held = [server.cli("sbatch", "--parsable", "--hold", "-J", name, "--wrap", "true",
                       cwd=tmp_path).stdout.strip() for name in ("first", "second")]  # fmt: skip
    ended = server.cli("sbatch", "--parsable", "-J", "ended", "--wrap", "exit 3",
                       cwd=tmp_path).stdout.strip()  # fmt: skip
    wait_ended(server.client(), ended)
    return {"held": held[0], "other": held[1], "ended": ended}


LINES = [
    ["squeue"], ["squeue", "-j", "{held}"], ["squeue", "-h", "-t", "PD", "-o", "%i %j %T %r"],
    ["squeue", "-h", "-j", "{ended}"], ["squeue", "-o", "%y"],
    ["sacct", "-j", "{ended}", "-X", "-P", "--format=JobID,JobName,State,ExitCode"],
    ["sacct", "-j", "{ended}", "--format", "MaxVMSize"], ["sacct", "-S", "tomorrow-ish"],
    ["scancel", "999999"], ["scancel"], ["scancel", "-s", "USR1", "{held}"],
    ["scontrol", "show", "job", "{held}"], ["sinfo"], ["squeue", "--frobnicate"],
]  # fmt: skip


def test_each_line_answers_the_same_on_both_paths(
    server: ServerProcess, jobs: dict[str, str], tmp_path: Path
) -> None:
    for template in LINES:
        args = [arg.format(**jobs) for arg in template]
        fast = _run(server, [GPUYARD, *args], tmp_path)
        typer_path = _run(server, [sys.executable, "-c", TYPER_PATH, *args], tmp_path)
        assert (fast.returncode, fast.stdout, fast.stderr) == (
            typer_path.returncode, typer_path.stdout, typer_path.stderr), args


def test_the_usual_lines_start_without_typer_and_a_wrong_value_gets_its_error(
    server: ServerProcess, jobs: dict[str, str], tmp_path: Path
) -> None:
    usual = [["squeue"], ["squeue", "-j", jobs["held"]], ["sacct", "-j", jobs["ended"]],
             ["sinfo"], ["scontrol", "show", "job", jobs["held"]]]  # fmt: skip
    for args in usual:
        assert not _typer_imported(server, args, tmp_path), args
    batch = ["sbatch", "--parsable", "--hold", "-p", "gpu", "--wrap", "true"]
    assert not _typer_imported(server, batch, tmp_path)
    assert not _typer_imported(server, ["scancel", jobs["other"]], tmp_path)
    assert wait_ended(server.client(), jobs["other"])["state"] == "CANCELLED"

    wrong = _run(server, [GPUYARD, "squeue", "-o", "%y"], tmp_path)  # the body finds it wrong
    assert wrong.returncode == 2 and wrong.stdout == ""
    assert "Invalid value for --format: %y is not a field gpuyard knows" in wrong.stderr
    assert "Traceback" not in wrong.stderr
