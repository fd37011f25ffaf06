"""A real server against clients that misbehave: bodies without a token, bodies too large, and
connections held open without a request."""

from __future__ import annotations

import json
import os
import resource
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.server import ServerProcess

pytestmark = pytest.mark.e2e


@pytest.fixture
def guarded(tmp_path: Path) -> Iterator[ServerProcess]:
    """A server whose connections must send their headers within 1 s."""
    env = dict(os.environ, GPUYARD_HEADER_TIMEOUT_S="1")
    srv = ServerProcess(tmp_path / "state", "--gpus", "1", "--cpus", "4", env=env)
    srv.start()
    yield srv
    srv.stop()
    srv.kill_jobs()


def _token(srv: ServerProcess) -> str:
    return (srv.state_dir / "token").read_text().strip()


def _request_head(srv: ServerProcess, head: str, body: bytes = b"") -> tuple[int, bytes]:
    """Send a request's head (and maybe part of a body) and read the answer, without sending
    the rest of the body."""
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as sock:
        sock.sendall(head.encode() + b"\r\n" + body)
        answer = b""
        while not _complete(answer):
            chunk = sock.recv(65536)
            if not chunk:
                break
            answer += chunk
        status = int(answer.split(b" ", 2)[1])
        return status, answer


def _complete(answer: bytes) -> bool:
    head, sep, body = answer.partition(b"\r\n\r\n")
    if not sep:
        return False
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return len(body) >= int(value)
    return True


def test_a_huge_body_without_a_token_is_refused_before_it_is_read(
    guarded: ServerProcess,
) -> None:
    head = (
        f"POST /api/v1/jobs HTTP/1.1\r\nHost: 127.0.0.1:{guarded.port}\r\n"
        "Content-Type: application/json\r\n"
        f"Content-Length: {800 << 20}\r\n"
    )
    began = time.monotonic()
    status, answer = _request_head(guarded, head, b"{")
    assert status == 401 and b"API token" in answer
    assert time.monotonic() - began < 5  # answered from the headers, not after 800 MiB


def test_bad_json_without_a_token_is_401_not_422(guarded: ServerProcess) -> None:
    head = (
        f"POST /api/v1/jobs HTTP/1.1\r\nHost: 127.0.0.1:{guarded.port}\r\n"
        "Content-Type: application/json\r\n"
        "Content-Length: 5\r\n"
    )
    status, _ = _request_head(guarded, head, b"{oops")
    assert status == 401


def test_a_body_over_the_limit_is_413_with_one_line(guarded: ServerProcess) -> None:
    head = (
        f"POST /api/v1/jobs HTTP/1.1\r\nHost: 127.0.0.1:{guarded.port}\r\n"
        "Content-Type: application/json\r\n"
        f"Authorization: Bearer {_token(guarded)}\r\nContent-Length: {100 << 20}\r\n"
    )
    status, answer = _request_head(guarded, head, b"{")
    assert status == 413
    message = json.loads(answer.split(b"\r\n\r\n", 1)[1] or b"{}")["error"]["message"]
    assert "larger than" in message and "\n" not in message


def test_idle_connections_neither_exhaust_the_server_nor_stay_for_ever(
    guarded: ServerProcess,
) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(4096, hard), hard))
    idle: list[socket.socket] = []
    try:
        for _ in range(1100):  # more than the server's old descriptor limit of 1024
            idle.append(socket.create_connection(("127.0.0.1", guarded.port), timeout=10))
        client = guarded.client()
        assert guarded.cli("queue").returncode == 0
        job = client.submit(["true"], name="after-the-flood", workdir=str(guarded.state_dir))
        assert job["id"] >= 1
        time.sleep(2.5)  # past the 1 s header deadline: the server closed them
        idle[0].settimeout(5)
        assert idle[0].recv(1) == b""
    finally:
        for sock in idle:
            sock.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_job_changes_stream_as_server_sent_events(guarded: ServerProcess) -> None:
    import httpx

    headers = {"Authorization": f"Bearer {_token(guarded)}"}
    seen: list[str] = []
    with httpx.stream(
        "GET", f"{guarded.url}/api/v1/jobs/changes", headers=headers, timeout=20
    ) as stream:
        job = guarded.client().submit(["true"], workdir=str(guarded.state_dir))
        for line in stream.iter_lines():
            if line.startswith("data: "):
                change = json.loads(line[len("data: ") :])
                if change["id"] == job["id"]:
                    seen.append(change["state"])
                if seen and seen[-1] == "COMPLETED":
                    break
    assert seen[0] == "PENDING" and "RUNNING" in seen and seen[-1] == "COMPLETED"
