"""`gpuyard simulate`: replay a job trace under scheduling policies (cli/simulating.py)."""

from typing import Annotated

import typer


def simulate_cmd(
    trace: Annotated[
        str,
        typer.Option(
            "--trace", help="CSV: job_id,user,submit_time_s,num_gpus,duration_s[,time_limit_s]"
        ),
    ],
    gpus: Annotated[int, typer.Option("--gpus", help="GPUs in the simulated cluster")],
    gpus_per_node: Annotated[int, typer.Option(help="GPUs per node")] = 8,
    policy: Annotated[str | None, typer.Option(help="the policy to replay [default]")] = None,
    compare: Annotated[
        str | None, typer.Option(help="P1,P2,...: replay each, one table row per policy")
    ] = None,
    restart_penalty: Annotated[
        float, typer.Option(help="seconds a preempted job loses when it restarts")
    ] = 60.0,
    json_out: Annotated[
        bool, typer.Option("--json", help="one JSON object per policy per line")
    ] = False,
    preemptible_fraction: Annotated[
        float | None,
        typer.Option(
            help="only this share of the jobs may be preempted (0-1; chosen by job id, the "
            "same jobs every run), as on a server where jobs opt in [every job]"
        ),
    ] = None,
    max_gpus_per_user: Annotated[
        int | None,
        typer.Option(
            metavar="N",
            help="every user may hold at most N GPUs at once: the live quota gate "
            "(QOSMaxGpuPerUser) replayed [no limit]",
        ),
    ] = None,
    time_limits: Annotated[
        str | None,
        typer.Option(
            metavar="none|trace|padded",
            help="jobs' time limits: none; the trace's time_limit_s; or padded (duration x 1-3 "
            "by job id, rounded up to 1/4/12/24/72/168 h); a job past its limit is killed "
            "[trace if the trace has limits, else none]",
        ),
    ] = None,
    explain: Annotated[
        int | None,
        typer.Option(
            metavar="JOB",
            help="after the table: where trace job JOB ranked among the pending jobs when it "
            "started, and the factors of the policy's key, in gpuyard show's words",
        ),
    ] = None,
) -> None:
    """Replay a job trace in simulated time under scheduling policies and compare them."""
    from gpuyard.cli.simulating import run_simulation

    run_simulation(trace, gpus, gpus_per_node, policy, compare, restart_penalty, json_out,
                   preemptible_fraction, max_gpus_per_user, time_limits, explain)  # fmt: skip


def register(app: typer.Typer, admin: typer.Typer) -> None:
    """Add `simulate` to the app."""
    app.command("simulate")(simulate_cmd)
