"""A flaky network never makes two jobs: the CLI and the SDK send every submit with a fresh
Idempotency-Key and send it again, with the same key, when the connection fails; a real server
behind a proxy that loses the first submit's answer (`flaky_proxy.py`) makes one job."""

from __future__ import annotations

import contextlib
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuyard.client import Client
from tests.e2e.flaky_proxy import DroppingProxy
from tests.e2e.server import GPUYARD, ServerProcess, free_port


@pytest.fixture
def proxied(tmp_path: Path) -> Iterator[tuple[ServerProcess, DroppingProxy]]:
    """A server and, in front of it, a proxy that loses the first submit's answer."""
    server = ServerProcess(tmp_path / "state", "--gpus", "2", "--kill-grace", "1")
    with DroppingProxy(server.port) as proxy:
        server.args += ["--public-name", f"127.0.0.1:{proxy.port}"]  # the client's Host
        server.start()
        try:
            yield server, proxy
        finally:
            server.stop()
            server.kill_jobs()


def _jobs_in_database(server: ServerProcess) -> list[tuple[int, str | None]]:
    with contextlib.closing(sqlite3.connect(server.state_dir / "gpuyard.db")) as db:
        return list(db.execute("SELECT id, idempotency_key FROM jobs ORDER BY id"))


def test_the_cli_retries_a_submit_whose_answer_was_lost(
    proxied: tuple[ServerProcess, DroppingProxy],
) -> None:
    server, proxy = proxied
    env = {**server.cli_env(), "GPUYARD_URL": proxy.url}
    done = subprocess.run([GPUYARD, "submit", "--", "true"], capture_output=True, text=True,
                          env=env, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (proxy.submits, proxy.dropped) == (2, 1)  # the answer was lost, the job was not
    [(job_id, key)] = _jobs_in_database(server)
    assert done.stdout == f"{job_id}\n"
    assert key is not None and len(key) == 36  # a uuid4
    assert "trying again" in done.stderr  # said once, not a silent wait


def test_the_sdk_retries_a_submit_whose_answer_was_lost(
    proxied: tuple[ServerProcess, DroppingProxy],
) -> None:
    server, proxy = proxied
    token = (server.state_dir / "token").read_text().strip()
    job = Client(proxy.url, token=token).submit(["true"], name="flaky")
    assert (proxy.submits, proxy.dropped) == (2, 1)
    assert [job_id for job_id, _ in _jobs_in_database(server)] == [job["id"]]
    assert job["name"] == "flaky"


def test_a_refused_submit_is_not_retried(proxied: tuple[ServerProcess, DroppingProxy]) -> None:
    server, proxy = proxied
    proxy.drops = 0
    env = {**server.cli_env(), "GPUYARD_URL": proxy.url}
    done = subprocess.run([GPUYARD, "submit", "--gpus", "64", "--", "true"],
                          capture_output=True, text=True, env=env, timeout=60)  # fmt: skip
    assert done.returncode == 1 and proxy.submits == 1
    assert done.stderr.count("\n") == 1 and "64 GPUs" in done.stderr
    assert _jobs_in_database(server) == []


def test_the_cli_waits_for_a_server_that_comes_up_within_the_window(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "state", "--gpus", "2", "--kill-grace", "1")
    server.start()  # once, so its token is in the state dir for the CLI to find
    server.stop()
    try:
        with subprocess.Popen([GPUYARD, "submit", "--", "true"], env=server.cli_env(), text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) as cli:  # fmt: skip
            assert cli.stderr is not None
            assert "trying again for up to 30 s" in cli.stderr.readline()  # it found no server
            server.start()
            out, err = cli.communicate(timeout=60)
        assert cli.returncode == 0, err
        [(job_id, _)] = _jobs_in_database(server)
        assert out == f"{job_id}\n"
    finally:
        server.stop()
        server.kill_jobs()


def test_the_cli_gives_up_in_one_line_when_no_server_comes(tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "GPUYARD_SOCKET": "off",
           "GPUYARD_URL": f"http://127.0.0.1:{free_port()}", "GPUYARD_TOKEN": "gpy_x",
           "GPUYARD_SUBMIT_RETRY_S": "1"}  # fmt: skip
    done = subprocess.run([GPUYARD, "submit", "--", "true"], capture_output=True, text=True,
                          env=env, timeout=60)  # fmt: skip
    assert done.returncode == 1 and done.stdout == ""
    notice, error = done.stderr.splitlines()
    assert "trying again for up to 1 s" in notice
    assert error.startswith("gpuyard: cannot reach gpuyard server at http://127.0.0.1:")
    assert "(tried for 1 s; nothing was queued)" in error
