"""`gpuyard run`: an interactive session (a pty the terminal attaches to) or JupyterLab.

    gpuyard run --gpus 1 -- bash

submits a job of kind "interactive" (queued, limited, accounted and cancelled like any job),
says on stderr why it waits while it is pending, then attaches this terminal to the job's pty
(`cli/attach.py`): raw mode, the window size, Ctrl-C for the job. When the job ends the
terminal is restored and `run` exits with the job's exit code. `gpuyard attach JOB` comes back
to a session left with `~.`. The session's socket is on the server's machine (for a session
another machine of a cluster runs, the server's relay of it: `adapters/ray/session_relay.py`):
a client of a server on another machine is told so before anything is queued. `--jupyter` is
`cli/jupyter.py`'s.
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from gpuyard.cli.cmd_common import OneJobRef

if TYPE_CHECKING:
    import socket

    from gpuyard.client import Client

_POLL_S = 0.2
_QUIET_S = 0.5  # a job that starts this soon after its submit is not said to wait
_SOCKET_WAIT_S = 30.0  # a running session's socket not there by then: not on this machine
_LOOPBACK = ("127.0.0.1", "localhost", "::1")


def run(
    command: Annotated[
        list[str] | None, typer.Argument(help="the program to run in the session, after --")
    ] = None,
    gpus: Annotated[int, typer.Option(help="GPUs (whole devices)")] = 0,
    gpu_mem: Annotated[
        str | None, typer.Option(help="GPU memory per GPU, e.g. 20G: share a GPU")
    ] = None,
    cpus: Annotated[int, typer.Option(help="CPU cores")] = 1,
    mem: Annotated[str | None, typer.Option(help="memory, e.g. 16G")] = None,
    time_limit: Annotated[
        str | None, typer.Option("--time", "-t", help="time limit: minutes, [D-]HH:MM:SS, 2h")
    ] = None,
    name: Annotated[str | None, typer.Option("--name", "-J", help="job name")] = None,
    workdir: Annotated[str | None, typer.Option(help="working directory (default: here)")] = None,
    env: Annotated[list[str] | None, typer.Option("--env", help="K=V, repeatable")] = None,
    python: Annotated[str | None, typer.Option(help="the interpreter the job runs")] = None,
    venv: Annotated[str | None, typer.Option(help="a virtualenv the job runs in")] = None,
    container: Annotated[
        str | None, typer.Option(help="a container image (apptainer or podman)")
    ] = None,
    jupyter: Annotated[
        bool, typer.Option("--jupyter", help="JupyterLab on the job's GPUs instead of a shell")
    ] = False,
) -> None:
    """Run an interactive session on allocated GPUs: waits for them, then attaches this
    terminal (Ctrl-C goes to the session; Enter ~. detaches); exits with the session's exit
    code."""
    options: dict[str, Any] = dict(
        gpus=gpus, gpu_mem=gpu_mem, cpus=cpus, mem=mem, time_limit=time_limit, name=name,
        workdir=workdir, env=env or [], python=python, venv=venv, container=container,
    )  # fmt: skip
    if jupyter:
        if command or container:
            _fail("--jupyter runs JupyterLab itself: give no command and no --container", 2)
        from gpuyard.cli.jupyter import run_jupyter

        del options["container"]
        raise typer.Exit(run_jupyter(**options))
    if not command:
        _fail("nothing to run: give the session's program after --, e.g. gpuyard run -- bash", 2)
    from gpuyard.cli.session import client
    from gpuyard.cli.submitting import build_submission

    session = client()
    _refuse_remote(session)
    argv, fields = build_submission(command, name, workdir, options["env"], True)
    fields.update(gpus=gpus, cpus=cpus, mem=mem, time_limit=time_limit, kind="interactive")
    for key in ("gpu_mem", "python", "venv", "container"):
        if options[key] is not None:
            fields[key] = options[key]
    job = session.submit(argv, **fields)
    raise typer.Exit(open_session(session, int(job["id"]), submitted=True))


def attach(job_ref: OneJobRef) -> None:
    """Attach this terminal to an interactive session (`gpuyard run`) again; waits if it has
    not started yet."""
    from gpuyard.cli.job_refs import one_id
    from gpuyard.cli.session import client

    session = client()
    _refuse_remote(session)
    job_id = one_id(session, job_ref)
    job = session.job(job_id)
    if job.get("kind") != "interactive":
        _fail(
            f"job {job_id} is not an interactive session (it is a {job.get('kind', 'batch')} "
            f"job): `gpuyard logs -f {job_id}` follows its output",
            2,
        )
    if job["state"] not in ("PENDING", "RUNNING"):
        _fail(f"job {job_id} has ended ({job['state']}): `gpuyard logs {job_id}` shows what its "
              "session showed")  # fmt: skip
    raise typer.Exit(open_session(session, job_id, submitted=False))


def open_session(session: Client, job_id: int, *, submitted: bool) -> int:
    """Wait for the session to start, relay this terminal to it until it ends (or is left),
    and return the exit status `gpuyard run` exits with."""
    from gpuyard.cli.attach import DETACHED, ENDED, relay, say, socket_path

    job = _wait_or_give_up(session, job_id, submitted)
    if job is None:
        return 130
    if job["state"] != "RUNNING":
        return _ended(job)
    sock = _connect(session, job_id, socket_path(job["log_path"]))
    if sock is None:
        return _ended(session.job(job_id))
    with sock:
        outcome = relay(sock, redraw=not submitted)  # an attach: the screen drawn again
    if outcome == ENDED:
        return _ended(_wait_end(session, job_id))
    if outcome == DETACHED:
        say(f"detached: job {job_id} runs on; `gpuyard attach {job_id}` comes back, "
            f"`gpuyard cancel {job_id}` ends it")  # fmt: skip
    else:
        say(f"job {job_id}'s session was taken over by another `gpuyard attach`")
    return 0


def _wait_or_give_up(session: Client, job_id: int, submitted: bool) -> dict[str, Any] | None:
    """The job once it runs or has ended; None if the user gave up first (Ctrl-C, the
    terminal closed, SIGTERM): a session `run` submitted is then cancelled, so that none is
    left to start later with nobody there."""
    import signal

    from gpuyard.cli.attach import say

    def give_up(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    before = {sig: signal.signal(sig, give_up) for sig in (signal.SIGHUP, signal.SIGTERM)}
    try:
        return _wait_started(session, job_id)
    except KeyboardInterrupt:
        if submitted:
            session.cancel(job_id)
            say(f"job {job_id} cancelled before it started")
        return None
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def _wait_started(session: Client, job_id: int) -> dict[str, Any]:
    """The job once it runs or has ended; while it is pending, each new reason it waits for
    in one line on stderr."""
    said = ""
    quiet_until = time.monotonic() + _QUIET_S
    while True:
        job = session.job(job_id)
        if job["state"] != "PENDING":
            return job
        reason = str(job.get("reason") or "")
        if reason != said and time.monotonic() >= quiet_until:
            sys.stderr.write(f"gpuyard: job {job_id} is waiting to start: {reason}\n")
            sys.stderr.flush()
            said = reason
        time.sleep(_POLL_S)


def _connect(session: Client, job_id: int, path: str) -> socket.socket | None:
    """Connected to the session's socket once its supervisor has made it; None if the job
    ended first."""
    from gpuyard.cli.attach import connect

    deadline = time.monotonic() + _SOCKET_WAIT_S
    while True:
        try:
            return connect(path)
        except PermissionError:
            _fail(f"job {job_id}'s session is another user's: only its owner (or root) can "
                  "attach to it")  # fmt: skip
        except (FileNotFoundError, ConnectionRefusedError):
            pass
        if session.job(job_id)["state"] != "RUNNING":
            return None
        if time.monotonic() > deadline:
            _fail(f"job {job_id}'s terminal did not appear at {path}: attaching needs the "
                  f"server's machine; `gpuyard cancel {job_id}` ends the session")  # fmt: skip
        time.sleep(_POLL_S / 4)


def _wait_end(session: Client, job_id: int) -> dict[str, Any]:
    """The job's record once the server has recorded its end (moments after its terminal
    closed)."""
    while True:
        job = session.job(job_id)
        if job["state"] not in ("PENDING", "RUNNING"):
            return job
        time.sleep(_POLL_S / 2)


def _ended(job: dict[str, Any]) -> int:
    """The exit status of an ended session: its exit code; a line on stderr when it ended
    otherwise than by its own exit (cancelled, its time limit, a failure to start)."""
    from gpuyard.cli.attach import say

    state, code = job["state"], job.get("exit_code")
    if state == "COMPLETED":
        return 0
    if state == "FAILED" and code not in (None, 127):
        return int(code)
    say(f"job {job['id']} {state}: {job.get('reason') or 'None'}")
    return int(code) if code else 1


def _refuse_remote(session: Client) -> None:
    """The session's socket is a file on the server's machine: a server elsewhere cannot be
    attached to from here (said before anything is queued)."""
    url = session.url
    if url.startswith("unix:"):
        return
    from gpuyard.client import split_url

    host = split_url(url)[1]
    if host in _LOOPBACK or _is_this_machine(host):
        return
    _fail(
        f"the server at {url} is on another machine, and a session attaches through a socket "
        "on the server's machine: run `gpuyard run` there (ssh to it); nothing was queued",
        2,
    )


def _is_this_machine(host: str) -> bool:
    """`host` names an address of this machine (one of its addresses can be bound)."""
    import socket

    try:
        found = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError:
        return False
    for family, kind, _, _, address in found:
        with socket.socket(family, kind) as probe:
            try:
                probe.bind((address[0], 0))
                return True
            except OSError:
                continue
    return False


def _fail(message: str, code: int = 1) -> NoReturn:
    sys.stderr.write(f"gpuyard: {message}\n")
    raise typer.Exit(code)


def register(app: typer.Typer, admin: typer.Typer) -> None:
    """Add this module's commands to the app (and to `gpuyard admin`)."""
    app.command("run", context_settings={"allow_interspersed_args": False})(run)
    app.command("attach")(attach)
