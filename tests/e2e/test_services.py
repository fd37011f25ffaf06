"""Services on a real server through the real CLI: `gpuyard serve` runs a small stdlib HTTP
server on the port the server chose, checks its health, restarts it on the same port when it is
killed or turns unhealthy, keeps its port across a server restart, and `cancel` ends it for
good. `run --jupyter` (`cli/jupyter.py`) serves a real JupyterLab behind its token."""

from __future__ import annotations

import getpass
import json
import os
import signal
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.e2e.server import ServerProcess, pid_alive, wait_ended, wait_for

# The service: answers GET /health (503 while a file `sick` exists) with its pid, records each
# run (pid, $PORT, $GPUYARD_SERVICE_PORT) and, starting, clears `sick` (a restart cures it).
SERVICE = """
import os
from http.server import BaseHTTPRequestHandler, HTTPServer

with open("runs", "a") as f:
    f.write(f"{os.getpid()} {os.environ['PORT']} {os.environ['GPUYARD_SERVICE_PORT']}\\n")
if os.path.exists("sick"):
    os.remove("sick")


class Health(BaseHTTPRequestHandler):
    def do_GET(self):
        body = str(os.getpid()).encode()
        self.send_response(503 if os.path.exists("sick") else 200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


HTTPServer(("127.0.0.1", int(os.environ["PORT"])), Health).serve_forever()
"""


def start_server(tmp_path: Path) -> ServerProcess:
    """Checks every 0.2 s, restarts after 0.2 s, 0.4 s, ... at most 1 s."""
    env = dict(
        os.environ, GPUYARD_SERVICE_CHECK_S="0.2", GPUYARD_SERVICE_BACKOFF_S="0.2",
        GPUYARD_SERVICE_BACKOFF_MAX_S="1",
    )  # fmt: skip
    return ServerProcess(
        tmp_path / "state", "--gpus", "1", "--cpus", "8", "--kill-grace", "1", env=env
    ).start()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    srv = start_server(tmp_path)
    yield srv
    srv.stop()
    srv.kill_jobs()


@pytest.fixture
def work(tmp_path: Path) -> Path:
    folder = tmp_path / "work"
    folder.mkdir()
    (folder / "svc.py").write_text(SERVICE)
    return folder


def runs(work: Path) -> list[tuple[int, int, int]]:
    """Each run of the service: (pid, $PORT, $GPUYARD_SERVICE_PORT)."""
    path = work / "runs"
    lines = path.read_text().split("\n") if path.exists() else []
    return [tuple(map(int, line.split())) for line in lines if line]  # type: ignore[misc]


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, ""


def healthy(server: ServerProcess, job_id: int, run: int) -> dict:  # type: ignore[type-arg]
    """The service once its `run`-th run (1 for the first) answers its health check."""
    return wait_for(  # type: ignore[no-any-return]
        lambda: (
            (j := server.client().job(job_id))["state"] == "RUNNING"
            and len(j["attempts"]) == run - 1
            and (j.get("service_health") or {}).get("state") == "healthy"
            and j
        )
    )


def serve(server: ServerProcess, work: Path, *args: str) -> tuple[int, str]:
    out = server.cli("serve", "--gpus", "1", *args, "--", sys.executable, "svc.py", cwd=work)
    job_id, url = out.stdout.split()
    return int(job_id), url


def test_a_service_answers_on_its_port_is_restarted_there_when_killed_and_cancel_ends_it(
    server: ServerProcess, work: Path
) -> None:
    job_id, url = serve(server, work, "--health", "/health", "--wait")
    [(pid, port, same)] = runs(work)
    assert url == f"http://127.0.0.1:{port}" and same == port
    assert get(f"{url}/health") == (200, str(pid))
    assert f"(service :{port} healthy)" in server.cli("queue").stdout
    shown = server.cli("show", str(job_id)).stdout
    assert f"Service: {url}, health /health: healthy since" in shown
    # Its GPU counts like any job's: a batch job for a GPU waits.
    batch = server.cli("submit", "--gpus", "1", "--", "true").stdout.strip()
    wait_for(lambda: server.client().job(int(batch))["reason"] == "Resources")

    os.kill(pid, signal.SIGKILL)
    job = healthy(server, job_id, run=2)
    [_, (pid2, port2, _)] = runs(work)
    assert port2 == port and pid2 != pid and get(f"{url}/health") == (200, str(pid2))
    assert job["attempts"][0]["reason"] == "Signal: killed by SIGKILL" and job["restarts"] == 1

    server.cli("cancel", str(job_id))
    assert wait_ended(server.client(), job_id)["state"] == "CANCELLED"
    wait_for(lambda: not pid_alive(pid2))
    assert wait_ended(server.client(), batch)["state"] == "COMPLETED"  # its GPU was freed
    assert len(runs(work)) == 2 and server.client().job(job_id)["state"] == "CANCELLED"


def test_an_unhealthy_service_is_restarted_past_its_grace_and_comes_back_healthy(
    server: ServerProcess, work: Path
) -> None:
    job_id, url = serve(server, work, "--health", "/health", "--health-grace", "0", "--wait")
    (work / "sick").touch()
    job = healthy(server, job_id, run=2)
    reason = job["attempts"][0]["reason"]
    assert reason.startswith(f"Unhealthy: 3 health checks of {url}/health failed in a row")
    assert "HTTP 503" in reason
    [(_, port, _), (pid2, port2, _)] = runs(work)
    assert port2 == port and get(f"{url}/health") == (200, str(pid2))


def test_ports_are_distinct_and_kept_across_a_server_restart(tmp_path: Path, work: Path) -> None:
    srv = start_server(tmp_path)
    try:
        # No GPUs: both run side by side on the one-GPU server.
        first, url1 = serve(srv, work, "--gpus", "0")
        second, url2 = serve(srv, work, "--gpus", "0")
        assert url1 != url2
        healthy(srv, first, run=1), healthy(srv, second, run=1)
        pids = {pid for pid, _, _ in runs(work)}
        srv.kill9()
        srv.start()
        for job_id, url in ((first, url1), (second, url2)):
            job = healthy(srv, job_id, run=1)  # re-adopted: the same run, health asked again
            assert job["service_url"] == url
        assert {pid for pid, _, _ in runs(work)} == pids  # nothing was started again
        _, url3 = serve(srv, work, "--gpus", "0")
        assert url3 not in (url1, url2)
        taken = url1.rsplit(":", 1)[1]
        refused = srv.cli("serve", "--port", taken, "--", "true", check=False, cwd=work)
        assert refused.returncode == 1
        assert refused.stderr == (
            f"gpuyard: port {taken} is held by service {first}: choose another port, or "
            "--port auto\n"
        )
    finally:
        srv.stop()
        srv.kill_jobs()


def test_run_jupyter_serves_jupyterlab_behind_a_token_that_no_command_line_shows(
    server: ServerProcess, tmp_path: Path
) -> None:
    notebooks = tmp_path / "notebooks"
    notebooks.mkdir()
    (notebooks / "hello.txt").write_text("hi")
    out = server.cli("run", "--gpus", "1", "--jupyter", "--python", sys.executable, "--workdir",
                     str(notebooks), timeout_s=180)  # fmt: skip
    job = server.client().job(int(out.stderr.split()[2].rstrip(":")))
    port, url = job["service_port"], job["service_url"]
    lines = out.stdout.splitlines()
    assert lines[0] == f"JupyterLab is running (job {job['id']}):"
    token = lines[1].strip().removeprefix(f"{url}/lab?token=")
    assert len(token) >= 32 and lines[3].strip().startswith(
        f"ssh -N -L {port}:127.0.0.1:{port} {getpass.getuser()}@"
    )
    # The token opens it; nothing opens it without.
    status, body = get(f"{url}/api/contents?token={token}")
    assert status == 200 and [e["name"] for e in json.loads(body)["content"]] == ["hello.txt"]
    assert get(f"{url}/api/contents")[0] == 403
    lab = [p for p in psutil.process_iter(["cmdline"])
           if "jupyterlab" in (p.info["cmdline"] or [])]  # fmt: skip
    assert lab and all(token not in " ".join(p.info["cmdline"]) for p in lab)
    assert f"(service :{port} healthy)" in server.cli("queue").stdout
    server.cli("cancel", str(job["id"]))
    assert wait_ended(server.client(), job["id"])["state"] == "CANCELLED"


def test_run_jupyter_without_jupyterlab_in_the_environment_says_how_to_install_it(
    server: ServerProcess, tmp_path: Path
) -> None:
    python = tmp_path / "bare" / "python"
    python.parent.mkdir()
    python.write_text("#!/bin/sh\nexit 1\n")  # an interpreter that has no jupyterlab
    python.chmod(0o755)
    refused = server.cli("run", "--jupyter", "--python", str(python), check=False)
    assert (refused.returncode, refused.stdout) == (1, "")
    assert refused.stderr == (
        f"gpuyard: JupyterLab is not installed for {python}: `{python} -m pip install jupyterlab`\n"
    )
    assert server.client().jobs() == []  # nothing was queued
