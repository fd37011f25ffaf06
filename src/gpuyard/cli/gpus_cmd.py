"""`gpuyard gpus`, `top`, `admin drain|resume`: the GPUs, seen and taken out of service."""

import sys
from typing import Annotated

import typer

from gpuyard.cli import commands
from gpuyard.cli.cmd_common import JsonOpt, fail
from gpuyard.cli.session import client


def gpus(json_out: JsonOpt = False) -> None:
    """The GPUs: utilisation, memory, temperature, power, processes and the job on each."""
    inventory = client().gpus()
    if json_out:
        commands.print_json(inventory)
        return
    from gpuyard.cli.render import gpu_rows

    if not inventory:
        sys.stdout.write(
            "no GPUs: the server runs CPU-only jobs (start it with --gpus N to declare)\n"
        )
        return
    sys.stdout.write(gpu_rows(inventory) + "\n")


def nodes(json_out: JsonOpt = False) -> None:
    """The machines, as `sinfo -N` shows nodes: state, GPUs, CPUs, memory, agent."""
    machines = client().nodes()
    if json_out:
        commands.print_json(machines)
        return
    from gpuyard.cli.node_format import node_rows

    sys.stdout.write(node_rows(machines) + "\n")


def top(
    interval: Annotated[
        float, typer.Option("--interval", "-d", help="seconds between redraws")
    ] = 1.0,
    iterations: Annotated[
        int | None, typer.Option("--iterations", "-n", help="stop after N frames (as top -n)")
    ] = None,
) -> None:
    """The GPUs and the running jobs, live (Ctrl-C to quit)."""
    if interval < 0.1:
        fail(f"--interval {interval}: use at least 0.1 s")
    from gpuyard.cli.top import run_top

    run_top(client(), interval, iterations)


_TARGET_HELP = "a GPU's index, or a machine's name (every GPU of it: `gpuyard nodes`)"


def _targets(target: str) -> list[int]:
    """The GPU indices a drain or resume names: one GPU, or every GPU of one machine."""
    if target.isdigit():
        return [int(target)]
    found = [g["index"] for g in client().gpus() if g.get("node") == target]
    if not found:
        fail(f"no GPU or machine named {target!r}: `gpuyard nodes` and `gpuyard gpus` list them")
    return found


def admin_drain(
    target: Annotated[str, typer.Argument(metavar="GPU|NODE", help=_TARGET_HELP)],
    reason: Annotated[str, typer.Option(help="why, shown in `gpuyard gpus`")] = "",
    now: Annotated[
        bool, typer.Option("--now", help="stop the jobs on it and requeue them (not failed)")
    ] = False,
) -> None:
    """Take a GPU, or a whole machine, out of service: no new job goes there; jobs on it
    finish (Slurm's DRAIN), or with --now are stopped and requeued."""
    for gpu in _targets(target):
        answer = client().drain(gpu, reason, now=now)
        running, requeued = answer.get("running_jobs") or [], answer.get("requeued_jobs") or []
        jobs = ""
        if running:
            held = ", ".join(map(str, running))
            jobs = f"; job(s) {held} on it finish there (--now requeues them)"
        if requeued:
            jobs = f"; job(s) {', '.join(map(str, requeued))} on it are stopped and requeued"
        sys.stdout.write(f"GPU {gpu} drained{jobs}\n")


def admin_resume(
    target: Annotated[str, typer.Argument(metavar="GPU|NODE", help=_TARGET_HELP)],
) -> None:
    """Put a drained GPU, or every GPU of a machine, back in service."""
    for gpu in _targets(target):
        client().resume(gpu)
        sys.stdout.write(f"GPU {gpu} is back in service\n")


def register(app: typer.Typer, admin: typer.Typer) -> None:
    """Add `gpus`, `nodes` and `top` to the app, `drain` and `resume` to `gpuyard admin`."""
    app.command("gpus")(gpus)
    app.command("nodes")(nodes)
    app.command("top")(top)
    admin.command("drain")(admin_drain)
    admin.command("resume")(admin_resume)
