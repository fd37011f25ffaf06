"""What a newcomer types at `submit` in the first hour: typos, Slurm habits, odd names, scripts.

Each is refused at submit in one line with nothing queued, or does what sbatch would do.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuyard.domain.errors import InvalidRequest
from tests.e2e.server import ServerProcess


def _queued(server: ServerProcess) -> list[dict[str, object]]:
    return list(json.loads(server.cli("queue", "--all", "--json").stdout))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--gpu", "1", "--", "echo", "hi"], "No such option: --gpu (Did you mean --gpus?)"),
        (["--jsn", "--", "true"], "No such option: --jsn (Did you mean --json?)"),
        (
            ["--qos", "low", "true"],
            "No such option: --qos (sbatch's, which means nothing here: "
            "limits are per user and team here (gpuyard admin limit); gpuyard sbatch ignores it)",
        ),
    ],
)
def test_an_unknown_option_before_the_command_is_a_usage_error(
    server: ServerProcess, args: list[str], message: str
) -> None:
    result = server.cli("submit", *args, check=False)
    assert result.returncode == 2, result.stderr
    assert result.stderr == f"gpuyard: {message}\n"
    assert _queued(server) == []


def test_options_after_the_command_or_after_dashes_are_the_commands(server: ServerProcess) -> None:
    job_id = server.cli("submit", "--", "echo", "--gpu", "1").stdout.strip()
    server.cli("wait", job_id)
    assert server.cli("logs", job_id).stdout == "--gpu 1\n"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-", "x"], "`-` (a script on standard input, as sbatch reads it) is not supported"),
        (
            ["--gpus", "2", "--gpus-per-node", "1", "x"],
            "--gpus 2 and --gpus-per-node 1 x --nodes 1",
        ),
    ],
)
def test_a_line_that_cannot_mean_what_was_typed_is_a_usage_error(
    server: ServerProcess, args: list[str], message: str
) -> None:
    result = server.cli("submit", *args, check=False)
    assert result.returncode == 2
    assert result.stderr.startswith(f"gpuyard: {message}") and result.stderr.count("\n") == 1
    assert _queued(server) == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--time", "1:99:99"], "bad duration '1:99:99'"),
        (["--time", "2-25"], "bad duration '2-25'"),
        (["--time", ""], "bad duration ''"),
        (["--mem", ""], "bad size ''"),
    ],
)
def test_inconsistent_or_out_of_range_input_is_refused(
    server: ServerProcess, args: list[str], message: str
) -> None:
    result = server.cli("submit", *args, "--", "true", check=False)
    assert result.returncode == 1, result.stderr
    assert message in result.stderr and result.stderr.count("\n") == 1, result.stderr
    assert _queued(server) == []


def test_a_script_path_that_does_not_exist_is_refused(
    server: ServerProcess, tmp_path: Path
) -> None:
    result = server.cli("submit", "./does-not-exist.sh", check=False, cwd=tmp_path)
    assert result.returncode == 1
    assert result.stderr == (
        f"gpuyard: ./does-not-exist.sh: no such file in {tmp_path}: give the script's path, "
        "or a command after --\n"
    )
    assert _queued(server) == []


@pytest.mark.parametrize("name", ["two\nlines", "red\x1b[31m", "nul\x00", "bell\x07"])
def test_a_name_with_control_characters_is_refused(server: ServerProcess, name: str) -> None:
    with pytest.raises(InvalidRequest, match="name: contains a control character"):
        server.client().submit(["true"], name=name)
    assert _queued(server) == []


def test_tables_escape_control_characters(server: ServerProcess) -> None:
    """A name that got in before names were checked (or a command) cannot reach the terminal raw."""
    job_id = server.cli("submit", "--", "sh", "-c", "sleep 30", "x\x1b[2Jy").stdout.strip()
    shown = server.cli("show", job_id).stdout
    assert "\x1b" not in shown and "\\x1b[2J" in shown
    server.cli("cancel", job_id)


def test_a_script_is_copied_at_submit_as_sbatch_does(server: ServerProcess, tmp_path: Path) -> None:
    blocker = server.cli("submit", "--gpus", "4", "--", "sleep", "30").stdout.strip()
    script = tmp_path / "job.sh"
    script.write_text('#!/bin/sh\necho "as submitted $1"\n')  # not executable: run by sh
    tool = tmp_path / "tool.sh"
    tool.write_text('#!/bin/sh\necho "tool as submitted"\n')
    tool.chmod(0o755)  # run by the kernel through its #! line
    queued = [server.cli("submit", "--gpus", "4", name, "a1", cwd=tmp_path).stdout.strip()
              for name in ("job.sh", "./tool.sh")]  # fmt: skip
    script.write_text('#!/bin/sh\necho "edited after submit"\n')
    tool.write_text('#!/bin/sh\necho "edited after submit"\n')
    server.cli("cancel", blocker)
    server.cli("wait", *queued)
    assert server.cli("logs", queued[0]).stdout == "as submitted a1\n"
    assert server.cli("logs", queued[1]).stdout == "tool as submitted\n"
    shown = server.client().job(int(queued[0]))
    assert shown["command"] == ["/bin/sh", str(script), "a1"] and shown["name"] == "job.sh"


def test_a_copied_python_script_still_imports_its_neighbours(
    server: ServerProcess, tmp_path: Path
) -> None:
    (tmp_path / "helpers.py").write_text("GREETING = 'hello from helpers'\n")
    (tmp_path / "train.py").write_text("import helpers\nprint(helpers.GREETING)\n")
    job_id = server.cli("submit", "train.py", cwd=tmp_path).stdout.strip()
    server.cli("wait", job_id)
    assert server.cli("logs", job_id).stdout == "hello from helpers\n"
