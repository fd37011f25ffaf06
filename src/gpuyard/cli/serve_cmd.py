"""`gpuyard serve`: a long-running service (a model server) on allocated GPUs, as a job.

    gpuyard serve --gpus 1 --port auto --health /health -- python -m my_model_server

submits a job of kind "service": the server chooses its port at submit (stable for the
service's life: `PORT` and `GPUYARD_SERVICE_PORT` in its environment), checks its health,
restarts it after any end but a cancel, and counts its GPUs like any job's. `serve` prints the
service's id and local address; with `--wait`, once it answers. `run --jupyter`
(`cli/jupyter.py`) is a service too and shares `start_service` and `wait_healthy`.
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpuyard.domain.errors import InvalidRequest

if TYPE_CHECKING:
    from gpuyard.client import Client

_POLL_S = 0.25
_TERMINAL = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL",
             "PREEMPTED")  # fmt: skip


class ServiceEnded(Exception):
    """A service's run ended while `--wait` waited for it to answer (the job record)."""

    def __init__(self, job: dict[str, Any]) -> None:
        super().__init__(job.get("reason", ""))
        self.job = job


def parse_port(text: str) -> int:
    """`--port auto` (0: the server chooses) or a TCP port."""
    if text.strip().lower() == "auto":
        return 0
    if not text.strip().isdigit() or not 1 <= int(text) <= 65535:
        raise InvalidRequest(f"--port {text!r}: give auto or a TCP port (1-65535)", field="port")
    return int(text)


def parse_grace_s(text: str) -> int:
    """`--health-grace`: seconds (`90`) or a duration with its unit (`2m`, `1h`)."""
    raw = text.strip()
    if raw.isdigit():
        return int(raw)
    from gpuyard.domain.units import parse_duration_s

    return parse_duration_s(raw, field="health_grace_s")


def service_fields(
    command: list[str],
    *,
    gpus: int = 0,
    cpus: int = 1,
    mem: str | None = None,
    gpu_mem: str | None = None,
    time_limit: str | None = None,
    name: str | None = None,
    priority: int = 0,
    workdir: str | None = None,
    env: list[str] | None = None,
    export_env: bool = True,
    port: int = 0,
    health: str = "",
    health_grace_s: int = 60,
    python: str | None = None,
    venv: str | None = None,
) -> tuple[list[str], dict[str, Any]]:
    """The argv and submit fields of a service (what `Client.submit` takes)."""
    from gpuyard.cli.submitting import build_submission

    argv, fields = build_submission(command, name, workdir, env or [], export_env)
    fields.update(
        gpus=gpus, cpus=cpus, mem=mem, time_limit=time_limit, priority=priority,
        kind="service", service_port=port, health_path=health, health_grace_s=health_grace_s,
    )  # fmt: skip
    if gpu_mem is not None:
        fields["gpu_mem"] = gpu_mem
    if python is not None:
        fields["python"] = python
    if venv is not None:
        fields["venv"] = venv
    return argv, fields


def start_service(session: Client, argv: list[str], fields: dict[str, Any]) -> dict[str, Any]:
    """Submit the service; the job as the server answered (its port chosen)."""
    return session.submit(argv, **fields)


def wait_healthy(session: Client, job_id: int, timeout_s: float | None = None) -> dict[str, Any]:
    """The service's record once its health check passed. Raises ServiceEnded when a run
    ends first (it failed to start: the server restarts it, but the user should know now),
    TimeoutError after `timeout_s`."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    first = session.job(job_id)
    restarts = first.get("restarts", 0)
    while True:
        job = session.job(job_id)
        if job["state"] in _TERMINAL or job.get("restarts", 0) > restarts:
            raise ServiceEnded(job)
        health = job.get("service_health") or {}
        if job["state"] == "RUNNING" and health.get("state") in ("healthy", "unchecked"):
            return job
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError(f"service {job_id} did not answer within {timeout_s:g} s")
        time.sleep(_POLL_S)


def ended_line(job: dict[str, Any]) -> str:
    """One line for a service whose run ended while we waited."""
    last = (job.get("attempts") or [{}])[-1] if job["state"] == "PENDING" else job
    why = last.get("reason") or job.get("reason")
    if job["state"] in _TERMINAL:
        return f"service {job['id']} ended {job['state']} ({why}): `gpuyard logs {job['id']}`"
    return (
        f"service {job['id']}'s run ended ({why}); it is restarted with a back-off: "
        f"`gpuyard logs {job['id']}` shows why, `gpuyard cancel {job['id']}` stops it"
    )


def serve(
    command: Annotated[list[str], typer.Argument(help="the service's command, after --")],
    gpus: Annotated[int, typer.Option(help="GPUs (whole devices)")] = 0,
    cpus: Annotated[int, typer.Option(help="CPU cores")] = 1,
    mem: Annotated[str | None, typer.Option(help="memory, e.g. 16G")] = None,
    gpu_mem: Annotated[
        str | None, typer.Option(help="GPU memory per GPU, e.g. 20G: share a GPU")
    ] = None,
    time_limit: Annotated[
        str | None,
        typer.Option(
            "--time", "-t", help="an end to the service (default: none, it runs until cancelled)"
        ),
    ] = None,
    name: Annotated[str | None, typer.Option("--name", "-J", help="job name")] = None,
    priority: Annotated[int, typer.Option(help="higher runs first")] = 0,
    workdir: Annotated[str | None, typer.Option(help="working directory (default: here)")] = None,
    env: Annotated[list[str] | None, typer.Option("--env", help="K=V, repeatable")] = None,
    export_env: Annotated[
        bool, typer.Option(help="pass PATH and the active virtualenv/conda env to the job")
    ] = True,
    port: Annotated[
        str,
        typer.Option(
            help="auto: the server chooses a free port (in $PORT), kept across "
            "restarts; or a port number"
        ),
    ] = "auto",
    health: Annotated[
        str,
        typer.Option(
            help="HTTP path checked on 127.0.0.1:PORT (2xx/3xx: healthy); default: "
            "a TCP connection to the port"
        ),
    ] = "",
    health_grace: Annotated[
        str,
        typer.Option(
            help="after each start, failed checks do not count this long (seconds, or 2m)"
        ),
    ] = "60",
    python: Annotated[str | None, typer.Option(help="the interpreter the job runs")] = None,
    venv: Annotated[str | None, typer.Option(help="a virtualenv the job runs in")] = None,
    wait: Annotated[
        bool, typer.Option("--wait", help="return once the service answers its health check")
    ] = False,
    wait_timeout: Annotated[
        float | None, typer.Option(help="with --wait: give up after this many seconds")
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="print the job as JSON")] = False,
) -> None:
    """Keep a service (a model server) running on its GPUs: health-checked, restarted on
    failure; prints its id and local address."""
    from gpuyard.cli import commands
    from gpuyard.cli.session import client

    argv, fields = service_fields(
        command, gpus=gpus, cpus=cpus, mem=mem, gpu_mem=gpu_mem, time_limit=time_limit,
        name=name, priority=priority, workdir=workdir, env=env, export_env=export_env,
        port=parse_port(port), health=health, health_grace_s=parse_grace_s(health_grace),
        python=python, venv=venv,
    )  # fmt: skip
    session = client()
    job = start_service(session, argv, fields)
    if not json_out:
        sys.stdout.write(f"{job['id']} {job['service_url']}\n")
        sys.stdout.flush()
    if wait:
        try:
            job = wait_healthy(session, job["id"], wait_timeout)
        except ServiceEnded as ended:
            sys.stderr.write(f"gpuyard: {ended_line(ended.job)}\n")
            raise typer.Exit(1) from None
        except TimeoutError as exc:
            sys.stderr.write(f"gpuyard: {exc}; it is still starting: `gpuyard show {job['id']}`\n")
            raise typer.Exit(1) from None
        if not json_out:
            sys.stderr.write(f"gpuyard: service {job['id']} is healthy at {job['service_url']}\n")
    if json_out:
        commands.print_json(job)


def register(app: typer.Typer, admin: typer.Typer) -> None:
    """Add this module's commands to the app (and to `gpuyard admin`)."""
    app.command("serve", context_settings={"allow_interspersed_args": False})(serve)
