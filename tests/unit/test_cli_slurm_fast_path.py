"""squeue, sacct, scancel and sbatch on the fast start path read a line exactly as typer would.

Each usual line must take the fast path (or these commands are slow again: issues 24, 27) and
hand its body the very values typer's command hands it; `--help`, an unknown option or a line
the fast path is not sure of must be left to typer, whose error the user still reads.
"""

from __future__ import annotations

from typing import Any

import click
import pytest
import typer.main

from gpuyard.cli import sbatch_cmd, slurm_queries
from gpuyard.cli.app import app
from gpuyard.cli.fast import parse_fast
from gpuyard.cli.sbatching import run_sbatch
from gpuyard.cli.slurm_fast import run

CLICK_APP = typer.main.get_command(app)
SUBMIT_FIELDS = ("command", "gpus", "cpus", "mem", "time", "name", "priority", "workdir", "env",
                 "export_env", "preemptible", "stop_signal", "distributed", "gpu_mem", "nodes",
                 "gpus_per_node", "dry_run", "json", "check", "retries", "retry_on", "output",
                 "error", "gres", "ntasks_per_node", "mem_per_gpu", "array", "dependency",
                 "export", "mail_type", "mail_user", "notify", "python", "venv", "container",
                 "gpu_type", "gpus_per_task")  # fmt: skip


def _sbatch_values(opts: Any, parsable: bool, wrap: str | None, values: dict[str, object]
                   ) -> dict[str, Any]:  # fmt: skip
    return {**{f: getattr(opts, f) for f in SUBMIT_FIELDS}, "parsable": parsable, "wrap": wrap,
            "slurm_values": values}  # fmt: skip


def typer_gives(args: list[str], monkeypatch: pytest.MonkeyPatch,
                capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:  # fmt: skip
    """What typer's command hands the body for `gpuyard ARGS` (the body itself not run), and
    what it wrote on stderr while reading the line."""
    got: dict[str, Any] = {}
    if args[0] == "sbatch":
        def spy(opts: Any, parsable: bool, wrap: str | None, values: dict[str, object]) -> int:
            got.update(_sbatch_values(opts, parsable, wrap, values))
            return 0

        monkeypatch.setattr(sbatch_cmd, "run_sbatch", spy)
    else:
        def spy_body(**params: Any) -> int:
            got.update(params)
            return 0

        monkeypatch.setattr(slurm_queries, args[0], spy_body)
    capsys.readouterr()
    CLICK_APP.main(args, standalone_mode=False)
    got["stderr"] = capsys.readouterr().err
    return got


def fast_gives(args: list[str]) -> dict[str, Any] | None:
    """The same as the fast path reads it; None: left to typer."""
    parsed = parse_fast(args)
    if parsed is None:
        return None
    body, arguments = parsed
    if body is run_sbatch:
        opts, parsable, wrap, values, warnings = arguments
        assert isinstance(warnings, list)
        return {**_sbatch_values(opts, bool(parsable), wrap,  # type: ignore[arg-type]
                                 values), "stderr": "".join(warnings)}  # type: ignore[arg-type]
    assert body is run
    command, params = arguments
    assert command is getattr(slurm_queries, args[0])
    return {**params, "stderr": ""}  # type: ignore[dict-item]


USUAL = [
    ["squeue"], ["squeue", "-j", "12"], ["squeue", "-h", "-j", "12"], ["squeue", "--me"],
    ["squeue", "-u", "alice", "-u", "bob,carol", "-t", "PD,R", "--noheader"],
    ["squeue", "-ualice", "--states=all", "-o", "%.18i %T %b", "-r", "-l"],
    ["squeue", "--jobs=12,13_[1-3]", "--name", "train", "-n", "eval", "--format=%i", "-p", "x"],
    ["squeue", "-o", "%i", "--format", "%j", "--array", "--long"],
    ["sacct"], ["sacct", "-j", "12"], ["sacct", "-j", "12", "-X", "-P", "-n"],
    ["sacct", "-j", "12", "-X", "--format=JobID,State,ExitCode,Elapsed", "-P"],
    ["sacct", "-a", "-S", "now-1hour", "-E", "now", "-s", "CD,F", "-b", "-l", "-p"],
    ["sacct", "--allusers", "--allocations", "--starttime=2026-01-02", "--name", "x",
     "--clusters", "gpuyard", "-M", "all", "-L", "--units", "G", "--noconvert", "-uroot"],
    ["sacct", "--jobs", "1,2", "--user=alice", "--state", "R", "--endtime=noon",
     "--brief", "--long", "--parsable", "--parsable2", "--noheader", "-o", "jobid"],
    ["scancel", "12"], ["scancel", "12", "13_2", "14_[1-3]"], ["scancel", "-q", "12"],
    ["scancel", "-u", "alice", "-t", "PENDING"], ["scancel", "--name=x", "--state=RUNNING"],
    ["scancel", "12", "--quiet", "13"], ["scancel", "-s", "USR1", "12"], ["scancel"],
    ["sbatch", "job.sh"], ["sbatch", "--parsable", "job.sh", "a", "--gpus", "2"],
    ["sbatch", "--wrap", "echo hi"], ["sbatch", "--parsable", "--wrap=exit 3"],
    ["sbatch", "--gpus", "2", "-J", "exp", "-t", "1:00:00", "--mem=16G", "job.sh"],
    ["sbatch", "-p", "gpu", "--qos=high", "-n", "4", "--gpus-per-task", "1", "job.sh"],
    ["sbatch", "-A", "lab", "--mem-per-cpu", "4G", "--array", "0-3", "-d", "afterok:3", "x.sh"],
    ["sbatch", "--", "job.sh"], ["sbatch"], ["sbatch", "--parsable"],
]  # fmt: skip


@pytest.mark.parametrize("args", USUAL, ids=" ".join)
def test_usual_slurm_lines_take_the_fast_path_and_read_as_typer_reads_them(
    args: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fast = fast_gives(args)
    assert fast is not None, "the fast path must take this line"
    assert fast == typer_gives(args, monkeypatch, capsys)


UNKNOWN = [  # the line, and what typer's message says
    (["squeue", "--frobnicate"], "No such option '--frobnicate'"),
    (["sacct", "-j", "12", "--frobnicate"], "No such option '--frobnicate'"),
    (["scancel", "--frobnicate", "12"], "No such option '--frobnicate'"),
    (["squeue", "-j"], "Option '-j' requires an argument"),
    (["sacct", "extra"], "Got unexpected extra argument (extra)"),
    (["sbatch", "--frobnicate", "job.sh"], "No such option: --frobnicate"),
]  # fmt: skip


@pytest.mark.parametrize(("args", "message"), UNKNOWN, ids=lambda a: str(a))
def test_an_unknown_option_is_left_to_typer_which_says_what_is_wrong(
    args: list[str], message: str
) -> None:
    assert parse_fast(args) is None
    with pytest.raises(click.ClickException) as info:
        CLICK_APP.main(args, standalone_mode=False)
    assert info.value.exit_code == 2 and message in info.value.format_message()


LEFT_TO_TYPER = [
    ["squeue", "--help"], ["sacct", "--help"], ["scancel", "--help"], ["sbatch", "--help"],
    ["squeue", "-hr"], ["squeue", "--noheader=1"], ["squeue", "-o", "-x"], ["squeue", "--"],
    ["sacct", "-j"], ["scancel", "--", "12"], ["scancel", "-h"], ["sbatch", "--gpus", "x", "j"],
    ["sbatch", "-p", "gpu", "--frobnicate", "job.sh"],
]  # fmt: skip


@pytest.mark.parametrize("args", LEFT_TO_TYPER, ids=" ".join)
def test_help_and_lines_the_fast_path_is_unsure_of_are_left_to_typer(args: list[str]) -> None:
    assert parse_fast(args) is None


def test_the_fast_path_knows_every_option_typers_sbatch_has() -> None:
    """sbatch's Slurm options are told from its own by this list, as typer tells them by its
    parameters: one missing would be taken as Slurm's on one path and not the other."""
    from gpuyard.cli import fast

    assert isinstance(CLICK_APP, click.Group)
    command = CLICK_APP.commands["sbatch"]
    names = {n for p in command.params if isinstance(p, click.Option)
             for n in (*p.opts, *p.secondary_opts)}  # fmt: skip
    assert names == set(fast.SUBMIT_OPTIONS) | set(fast.SBATCH_OWN)
