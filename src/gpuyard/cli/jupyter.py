"""`gpuyard run --jupyter`: JupyterLab on allocated GPUs, as a service job.

    gpuyard run --gpus 1 --jupyter

submits a service that runs the job environment's JupyterLab bound to loopback on the port the
server chose (`$PORT`), waits for it to answer, then prints the URL with its token and the ssh
command that tunnels the port from a laptop. The token is random, made here, and reaches the
job in its environment (`JUPYTER_TOKEN`), never on its command line, which `ps` shows to
every user of the machine. `cli/run_cmd.py` calls `run_jupyter` with the resource options.
"""

from __future__ import annotations

import getpass
import os
import secrets
import shutil
import socket
import subprocess
import sys
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from gpuyard.cli.serve_cmd import ServiceEnded, ended_line, service_fields, wait_healthy
from gpuyard.domain.errors import InvalidRequest

if TYPE_CHECKING:
    from gpuyard.client import Client

# Asked by the health check: JupyterLab's version route answers without the token.
HEALTH_PATH = "/api"
# `--port` comes from the job's environment (chosen by the server), so a shell expands it;
# port_retries 0: a port taken meanwhile fails the run instead of moving to another port.
_LAUNCH = 'exec "$0" "$@" --port="$PORT"'
# What the job's log says when its environment has no JupyterLab.
_MISSING = ("No module named jupyterlab", "No module named 'jupyterlab'",
            "'lab' is not a Jupyter command")  # fmt: skip
_LOOPBACK = ("127.0.0.1", "localhost", "::1", "")


def jupyter_command(python: str | None, venv: str | None) -> list[str]:
    """How the job starts JupyterLab: the job's interpreter (`--python`, `--venv`) with
    `-m jupyterlab`, else `jupyter lab` from PATH. InvalidRequest (one line, with the pip
    command) when it is not installed there."""
    interpreter = python or (os.path.join(venv, "bin", "python") if venv else None)
    if interpreter is None:
        found = shutil.which("jupyter")
        if found is None or not _has_jupyterlab(os.path.join(os.path.dirname(found), "python")):
            raise InvalidRequest(
                "JupyterLab is not installed in this environment: `pip install jupyterlab` "
                "(or give the job's environment with --venv or --python)"
            )
        return [found, "lab"]
    if os.path.exists(interpreter) and not _has_jupyterlab(interpreter):
        raise InvalidRequest(
            f"JupyterLab is not installed for {interpreter}: `{interpreter} -m pip install "
            "jupyterlab`"
        )
    return [interpreter, "-m", "jupyterlab"]


def _has_jupyterlab(interpreter: str) -> bool:
    """Whether `interpreter` imports jupyterlab (True when it cannot be asked: the job's
    own failure will say)."""
    if not os.path.exists(interpreter):
        return True
    try:
        found = subprocess.run(
            [interpreter, "-c", "import importlib.util as u; "
             "raise SystemExit(u.find_spec('jupyterlab') is None)"],
            capture_output=True, timeout=30,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return True
    return found.returncode == 0


def jupyter_argv(command: list[str], root_dir: str) -> list[str]:
    return [
        "/bin/sh", "-c", _LAUNCH, *command, "--ip=127.0.0.1", "--no-browser",
        "--ServerApp.port_retries=0", f"--ServerApp.root_dir={root_dir}",
        # Who may run a job as root is the server's run-as policy's call, made already.
        "--ServerApp.allow_root=True",
    ]  # fmt: skip


def tunnel_host(url: str) -> str | None:
    """The machine the ssh tunnel goes to: the server's, as the client reaches it; on this
    machine its name (None when it calls itself only `localhost`, which from another machine
    is that one)."""
    host = (urlsplit(url).hostname or "") if url.startswith("http") else ""
    if host not in _LOOPBACK:
        return host
    for name in (socket.getfqdn(), socket.gethostname()):
        if not _loopback_name(name):
            return name
    return None


def _loopback_name(name: str) -> bool:
    """`localhost`, `localhost.localdomain`, `ip6-localhost`, 127.0.0.1, ...: names that mean
    the machine they are typed on."""
    from gpuyard.locations import is_loopback

    name = name.strip().rstrip(".").lower()
    return (
        name in ("", "localhost", "ip6-localhost", "ip6-loopback")
        or name.startswith("localhost.")
        or is_loopback(name)
    )


def tunnel_lines(port: int, user: str, host: str | None) -> list[str]:
    """How to reach the job's port from one's own machine: the ssh tunnel, with the name to
    type in it when this machine does not know its own."""
    if host is not None:
        return ["From your own machine, open a tunnel first:",
                f"  ssh -N -L {port}:127.0.0.1:{port} {user}@{host}"]  # fmt: skip
    return [
        "From your own machine, open a tunnel first (HOST: the name or address you ssh to this "
        "machine by; it calls itself only localhost):",
        f"  ssh -N -L {port}:127.0.0.1:{port} {user}@HOST",
    ]


def run_jupyter(
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
    python: str | None = None,
    venv: str | None = None,
    health_grace_s: int = 120,
    wait_timeout_s: float | None = None,
) -> int:
    """Start JupyterLab as a service job, wait until it answers, print how to reach it.
    Returns the exit status (0: running; 1: it could not start, and it was cancelled)."""
    from gpuyard.cli.session import client

    root_dir = os.path.abspath(workdir) if workdir else os.getcwd()
    token = secrets.token_urlsafe(24)
    argv, fields = service_fields(
        jupyter_argv(jupyter_command(python, venv), root_dir), gpus=gpus, cpus=cpus, mem=mem,
        gpu_mem=gpu_mem, time_limit=time_limit, name=name or "jupyter", priority=priority,
        workdir=root_dir, env=env, export_env=export_env, port=0, health=HEALTH_PATH,
        health_grace_s=health_grace_s, python=python, venv=venv,
    )  # fmt: skip
    fields["env"]["JUPYTER_TOKEN"] = token  # the environment, never the command line
    session = client()
    job: dict[str, Any] = session.submit(argv, **fields)
    job_id = job["id"]
    sys.stderr.write(f"gpuyard: job {job_id}: JupyterLab starting (waiting for its GPUs)...\n")
    try:
        job = wait_healthy(session, job_id, wait_timeout_s)
    except ServiceEnded as ended:
        sys.stderr.write(f"gpuyard: {_why_not_started(session, ended.job)}\n")
        session.cancel(job_id)
        return 1
    except TimeoutError as exc:
        sys.stderr.write(f"gpuyard: {exc}; `gpuyard show {job_id}`, `gpuyard cancel {job_id}`\n")
        return 1
    except KeyboardInterrupt:
        sys.stderr.write(
            f"gpuyard: not waiting any more; job {job_id} goes on: `gpuyard cancel {job_id}`\n"
        )
        return 130
    port = job["service_port"]
    user, host = getpass.getuser(), tunnel_host(session.url)
    sys.stdout.write(
        f"JupyterLab is running (job {job_id}):\n"
        f"  {job['service_url']}/lab?token={token}\n"
        + "".join(line + "\n" for line in tunnel_lines(port, user, host))
        + f"Stop it with: gpuyard cancel {job_id}\n"
    )
    return 0


def _why_not_started(session: Client, job: dict[str, Any]) -> str:
    """Why JupyterLab did not come up: not installed (the pip line), else the run's end."""
    try:
        tail = session.log(int(job["id"]), tail=40).decode(errors="replace")
    except Exception:  # the log is advice only
        tail = ""
    if any(marker in tail for marker in _MISSING):
        return (
            "JupyterLab is not installed in the job's environment: `pip install jupyterlab` "
            "there (the job was cancelled)"
        )
    return ended_line(job) + " (the job was cancelled)"
