"""`gpuyard dashboard`, `doctor` and `server`: the server, its machine and its web dashboard."""

from typing import Annotated

import typer

from gpuyard.cli.cmd_common import JsonOpt, fail
from gpuyard.cli.session import client
from gpuyard.domain.errors import GpuyardError


def dashboard(
    open_browser: Annotated[
        bool, typer.Option("--open", help="open the link in this machine's browser")
    ] = False,
    json_out: JsonOpt = False,
) -> None:
    """Print a one-time link to the web dashboard, logged in as you (valid a minute, once)."""
    from gpuyard.cli.dashboard import run

    try:
        run(client(), open_browser=open_browser, json_out=json_out)
    except GpuyardError as exc:
        fail(exc.message)


def doctor(
    json_out: JsonOpt = False,
    state_dir: Annotated[
        str | None, typer.Option(help="the server's state dir, for its free disk")
    ] = None,
    python: Annotated[
        str | None, typer.Option(help="check this interpreter's frameworks [python3 on PATH]")
    ] = None,
    node: Annotated[
        str | None,
        typer.Option("--node", help="check this machine of the server instead (admins)"),
    ] = None,
    all_nodes: Annotated[
        bool, typer.Option("--all", help="check every machine of `gpuyard nodes` (admins)")
    ] = False,
) -> None:
    """Check driver, CUDA, GPUs, frameworks and disk: PASS/WARN/FAIL, each with a fix."""
    if node is not None or all_nodes:
        if node is not None and all_nodes:
            fail("--node and --all: give one (--all checks every machine)", 2)
        if state_dir is not None or python is not None:
            fail("--state-dir and --python are this machine's: a machine's agent checks its "
                 "own folder and python3", 2)  # fmt: skip
        from gpuyard.cli.doctor_nodes import run_all_doctor, run_node_doctor

        try:
            if node is not None:
                raise typer.Exit(run_node_doctor(client(), node, json_out))
            raise typer.Exit(run_all_doctor(client(), json_out))
        except GpuyardError as exc:
            fail(exc.message)
    from gpuyard.cli.doctoring import run_doctor

    raise typer.Exit(run_doctor(json_out, state_dir, python))


def server(
    host: Annotated[str | None, typer.Option(help="address to bind [127.0.0.1]")] = None,
    port: Annotated[int | None, typer.Option(help="port [8765]")] = None,
    state_dir: Annotated[
        str | None,
        typer.Option(
            help="database, logs, job folders [~/.local/share/gpuyard; root: /var/lib/gpuyard]"
        ),
    ] = None,
    gpus: Annotated[
        str | None, typer.Option("--gpus", help="auto | N (declare N without a driver) | 0,2")
    ] = None,
    cpus: Annotated[int | None, typer.Option(help="CPU cores jobs may use [all]")] = None,
    kill_grace: Annotated[
        float | None, typer.Option(help="seconds between SIGTERM and SIGKILL [10]")
    ] = None,
    policy: Annotated[
        str | None,
        typer.Option(help="scheduling policy: default, fifo, backfill, fairshare, las [default]"),
    ] = None,
    gpu_mem_per_gpu: Annotated[
        str | None,
        typer.Option(help="memory of each declared GPU, e.g. 80G (lets --gpu-mem jobs share)"),
    ] = None,
    backend: Annotated[
        str | None, typer.Option(help="local (this machine) or ray (a Ray cluster) [local]")
    ] = None,
    ray_address: Annotated[
        str | None,
        typer.Option(help="GCS host:port of an existing Ray cluster [start a local one]"),
    ] = None,
    preemptible_default: Annotated[
        bool | None,
        typer.Option(
            "--preemptible-default/--no-preemptible-default",
            help="jobs that say neither --preemptible nor --no-preempt may be preempted "
            "(for a lab whose jobs checkpoint) [no]",
            show_default=False,
        ),
    ] = None,
    allow_remote: Annotated[
        bool,
        typer.Option(
            "--allow-remote",
            help="let a --host other than loopback take requests (plain HTTP: put TLS in "
            "front, e.g. a reverse proxy)",
        ),
    ] = False,
    public_name: Annotated[
        list[str] | None,
        typer.Option(
            "--public-name",
            help="a name clients reach the server by (a reverse proxy's host[:port]), "
            "accepted in Host/Origin; repeat for more",
        ),
    ] = None,
    socket_path: Annotated[
        str | None,
        typer.Option(
            "--socket",
            help="a root server's Unix socket for local users, who need no token (the kernel "
            "says who they are); off: none [/run/gpuyard/gpuyard.sock]",
        ),
    ] = None,
    register_local_users: Annotated[
        bool | None,
        typer.Option(
            "--register-local-users/--no-register-local-users",
            help="a local user on the socket without an account gets one (role user) [yes]",
            show_default=False,
        ),
    ] = None,
    fair_share_half_life: Annotated[
        str | None,
        typer.Option(
            metavar="DURATION",
            help="past GPU usage counts half after this long (fairshare, gpuyard share) [7d]",
        ),
    ] = None,
    db: Annotated[
        str | None,
        typer.Option(
            "--db",
            metavar="URL",
            help="the database: a SQLite file's path, or postgresql://USER@HOST:PORT/DB "
            "(password from --db-password-file, ~/.pgpass or PGPASSWORD, never in the URL: "
            "ps shows it to all) [gpuyard.db in the state dir]",
        ),
    ] = None,
    db_password_file: Annotated[
        str | None,
        typer.Option(
            "--db-password-file",
            metavar="FILE",
            help="the --db URL's password, the file's first line (GPUYARD_DB_PASSWORD_FILE; "
            "a file other users may not read)",
        ),
    ] = None,
    standby: Annotated[
        bool,
        typer.Option(
            "--standby",
            help="if another server holds the database, wait for it to stop, then take over "
            "(instead of refusing to start)",
        ),
    ] = False,
) -> None:
    """Run the server: HTTP API, scheduler and executor in one process."""
    from gpuyard.cli.serving import run_server
    from gpuyard.domain.units import parse_duration_s, parse_size_mib
    from gpuyard.settings import Settings, has_password

    if db and has_password(db):  # not "gpuyard:": that prefix is an error's
        typer.echo(
            "warning: the --db URL's password is on the command line, which every local user "
            "reads in ps: put it in a file (--db-password-file, GPUYARD_DB_PASSWORD_FILE), "
            "~/.pgpass or PGPASSWORD",
            err=True,
        )

    try:
        declared = (
            parse_size_mib(gpu_mem_per_gpu, field="gpu_mem_per_gpu") if gpu_mem_per_gpu else None
        )
        settings = Settings.from_env(
            host=host, port=port, state_dir=state_dir, gpus=gpus, cpus=cpus,
            kill_grace_s=kill_grace, policy=policy, declared_gpu_mem_mib=declared,
            backend=backend, ray_address=ray_address, preemptible_default=preemptible_default,
            allow_remote=allow_remote or None,
            public_names=tuple(public_name) if public_name else None,
            socket=socket_path, register_local_users=register_local_users,
            fair_share_half_life_s=parse_duration_s(
                fair_share_half_life, field="fair_share_half_life"
            ) if fair_share_half_life else None,
            database_url=db, db_password_file=db_password_file, standby=standby or None,
        )  # fmt: skip
    except (ValueError, GpuyardError) as exc:
        fail(str(exc))
    run_server(settings)


def register(app: typer.Typer, admin: typer.Typer) -> None:
    """Add `dashboard`, `doctor` and `server` to the app."""
    app.command("dashboard")(dashboard)
    app.command("doctor")(doctor)
    app.command("server")(server)
