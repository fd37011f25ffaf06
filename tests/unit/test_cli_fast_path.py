"""The CLI's fast start path reads a command line exactly as typer would, or leaves it to typer.

Every line the fast path accepts must give the values typer's own parser gives; the usual lines
must be accepted (or the CLI is slow again); `--help`, unknown options and usage errors must be
left to typer.
"""

from __future__ import annotations

from typing import Any

import click
import pytest
import typer.main
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuyard.cli import commands
from gpuyard.cli.app import app
from gpuyard.cli.fast import parse_fast

CLICK_APP = typer.main.get_command(app)
SUBMIT_FIELDS = ("command", "gpus", "cpus", "mem", "time", "name", "priority", "workdir", "env",
                 "export_env", "preemptible", "stop_signal", "distributed", "gpu_mem", "nodes",
                 "gpus_per_node", "dry_run", "json", "check", "retries", "retry_on", "output",
                 "error",
                 "gres", "ntasks_per_node", "mem_per_gpu", "array", "dependency", "export",
                 "mail_type", "mail_user", "notify", "python", "venv", "container",
                 "gpu_type", "gpus_per_task")  # fmt: skip


def typer_reads(args: list[str]) -> dict[str, Any] | None:
    """The parameters typer's parser makes of `args`; None for help or a usage error."""
    assert isinstance(CLICK_APP, click.Group)
    command = CLICK_APP.commands.get(args[0])
    if command is None:
        return None
    try:
        ctx = command.make_context(args[0], list(args[1:]))
    except (click.exceptions.ClickException, click.exceptions.Exit):
        return None
    return {k: list(v) if isinstance(v, tuple) else v for k, v in ctx.params.items()}


def fast_reads(args: list[str]) -> dict[str, Any] | None:
    """The same, as the fast path reads them; None: left to typer."""
    parsed = parse_fast(args)
    if parsed is None:
        return None
    body, arguments = parsed
    if body is commands.submit:
        (opts,) = arguments
        values = {name: getattr(opts, name) for name in SUBMIT_FIELDS}
        return values
    if body is commands.queue:  # history filters are left to typer: none given here
        unset = dict.fromkeys(("limit", "before", "since", "user", "name"))
        views = {"me": False, "fmt": None, "sort": None}  # --me, --format, --sort: typer's too
        return {"all": arguments[0], "json_out": arguments[1], "state": [], **unset, **views,
                "expand": arguments[5]}  # fmt: skip
    if body is commands.show:
        return {"job_id": arguments[0], "json_out": arguments[1]}
    assert body is commands.cancel
    return {"job_ids": arguments[0], "signal": None}


USUAL = [
    ["submit", "--", "true"],
    ["submit", "python", "train.py", "--lr", "0.1"],
    ["submit", "--gpus", "2", "--time", "2h", "--mem=16G", "-J", "exp", "--", "python", "t.py"],
    ["submit", "-t90", "--env", "A=1", "--env", "B=2", "--no-export-env", "--", "sh", "-c", "x"],
    ["submit", "-N", "2", "-G", "8", "-c8", "-D", "/tmp", "-J", "x", "-o", "%j.out", "-e",
     "%j.err", "job.sh"],
    ["submit", "--gres=gpu:a100:4", "--ntasks-per-node", "4", "--mem-per-gpu", "32G", "job.sh"],
    ["submit", "--array", "0-9%2", "-d", "afterok:3", "--export=ALL,A=1", "--requeue", "x.sh"],
    ["submit", "--mail-type", "END,FAIL", "--mail-user", "http://h/x", "--notify", "http://a",
     "--notify", "http://b", "--python", "/usr/bin/python3", "--gpu-type", "h100", "x.py"],
    ["submit", "--venv", "/v", "--no-requeue", "--cpus-per-task", "2", "--chdir", "d", "x.sh"],
    ["submit", "--container", "img.sif", "-a1-3", "-ddep", "-oout", "-eerr", "--", "x"],
    ["submit", "--gpu-mem", "8G", "--no-preempt", "--priority", "-5", "--", "python", "t.py"],
    ["submit", "--nodes", "2", "--gpus-per-node", "4", "--distributed", "torchrun", "t.py"],
    ["submit", "--ntasks-per-node", "2", "--gpus-per-task", "1", "job.sh"],
    ["submit", "--dry-run", "--gpus", "1", "--", "true"],
    ["submit", "--dry-run", "--json", "--", "true"],
    ["submit", "--preemptible", "--signal", "USR1", "--", "python", "t.py"],
    ["submit", "--signal=10", "--no-preempt", "--preemptible", "t.py"],
    ["submit", "--retries", "3", "--retry-on", "failed,timeout", "--signal", "USR1@120", "t.py"],
    ["submit", "--retries=2", "--", "python", "t.py"],
    ["submit", "--workdir", "/tmp", "--cpus", "4", "--", "python", "--", "--gpus", "3"],
    ["queue"], ["queue", "--all"], ["queue", "-a", "--json"], ["ps", "--json"],
    ["show", "12"], ["show", "--json", "12"], ["show", "12", "--json"],
    ["cancel", "3"], ["cancel", "3", "4", "5"],
    ["queue", "--array"], ["queue", "-r", "-a"], ["show", "12_3"], ["show", "12_[1-3,5]"],
    ["cancel", "12", "12_3", "13_[0-2]"],
]  # fmt: skip
LEFT_TO_TYPER = [
    ["submit"], ["submit", "--help"], ["submit", "--gpus"], ["submit", "--gpus", "two", "x"],
    ["submit", "--frobnicate", "x"], ["submit", "--nodes", "0", "x"], ["submit", "--check=1", "x"],
    ["submit", "--retries=-1", "x"], ["submit", "--cpus", "0", "x"], ["submit", "-G", "-1", "x"],
    ["submit", "--ntasks-per-node", "0", "x"], ["submit", "--requeue=1", "x"],
    ["queue", "extra"], ["queue", "-ab"], ["queue", "--help"], ["show"], ["show", "x"],
    ["show", "1", "2"], ["cancel"], ["cancel", "-3"], ["gpus"], ["logs", "1"], ["--help"], [],
    ["show", "12_"], ["show", "_3"], ["show", "12_[]"], ["show", "12_x"], ["cancel", "0"],
    ["cancel", "12_3_4"],
]  # fmt: skip


UNKNOWN_BEFORE_COMMAND = [
    (["submit", "--gpu", "1", "--", "echo", "hi"], "No such option: --gpu (Did you mean --gpus?)"),
    (["submit", "--frobnicate", "--", "true"], "No such option: --frobnicate"),
    (["submit", "-p", "gpu", "x"], "No such option: -p (sbatch's, which means nothing here: one "
     "queue per server here; gpuyard sbatch ignores it)"),
    (["submit", "--ntasks", "4", "x"], "No such option: --ntasks (sbatch's: give it as #SBATCH "
     "--ntasks in the script, or use gpuyard sbatch)"),
    (["submit", "--gpus-per-nod", "1", "x"],
     "No such option: --gpus-per-nod (Did you mean --gpus-per-node?)"),
]  # fmt: skip


@pytest.mark.parametrize(("args", "message"), UNKNOWN_BEFORE_COMMAND, ids=lambda a: str(a))
def test_an_unknown_option_before_the_command_is_a_usage_error_on_both_paths(
    args: list[str], message: str
) -> None:
    """Not the job's command (it used to queue `['--gpu', '1', '--', 'echo', 'hi']`): the fast
    path leaves the line to typer, which names the closest option once, in one line."""
    assert parse_fast(args) is None
    assert typer_reads(args) is None
    with pytest.raises(click.ClickException) as info:
        CLICK_APP.main(args, standalone_mode=False)
    assert info.value.exit_code == 2 and info.value.message == message


@pytest.mark.parametrize("args", USUAL, ids=" ".join)
def test_usual_lines_take_the_fast_path_and_read_as_typer_reads_them(args: list[str]) -> None:
    assert fast_reads(args) is not None, "the fast path must take this line"
    assert fast_reads(args) == typer_reads(args)


@pytest.mark.parametrize("args", LEFT_TO_TYPER, ids=" ".join)
def test_help_and_usage_errors_are_left_to_typer(args: list[str]) -> None:
    assert parse_fast(args) is None


WORDS = ["--gpus", "--cpus", "--mem", "--time", "-t", "-t2h", "--time=1h", "-J", "--name",
         "--name=a=b", "--priority", "--workdir", "--env", "-e", "-eA=1", "--export-env",
         "-G", "-c", "-c4", "-N", "-N2", "-D", "--chdir", "--gres", "gpu:2", "--ntasks-per-node",
         "--mem-per-gpu", "-a", "-d", "--export", "--mail-type", "--mail-user", "--notify",
         "--python", "--venv", "--container", "--gpu-type", "--requeue", "--no-requeue",
         "--cpus-per-task", "--error", "--output",
         "--no-export-env", "--no-preempt", "--no-preempt=1", "--distributed", "--gpu-mem",
         "--nodes", "--gpus-per-node", "--gpus-per-task", "--dry-run", "--check", "--", "-",
         "--help", "-h",
         "--frob", "--gpus=", "--gpus=3", "--json", "--all", "-a", "-ab", "0", "1", "2", "-5",
         " 7 ", "K=V", "x", "python", "16G", "torchrun", "--gpu", "-o", "--array=1-3",
         "--dependency", "--retries", "--retry-on", "oom,launch", "USR1@60", "12_3",
         "12_[1-3]", "1_", "_1", "--array", "-r", "-ar", "12_[x]"]  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(
    st.sampled_from(["submit", "queue", "ps", "show", "cancel"]),
    st.lists(st.sampled_from(WORDS), max_size=8),
)
def test_any_line_the_fast_path_takes_reads_as_typer_reads_it(command: str, words: list[str]):
    args = [command, *words]
    fast = fast_reads(args)
    if fast is not None:
        assert fast == typer_reads(args)
