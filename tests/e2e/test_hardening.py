"""Issue 11's hardening against a real server on loopback: a symlink a job plants is never
followed, user text cannot forge the server's log lines, Host/Origin are checked, failed
authentication is throttled, the metrics token opens /metrics only, a non-loopback bind must be
asked for, and the CLI never hands its token to a listener that cannot prove it is the server."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import threading
import urllib.parse
from pathlib import Path

import pytest

from gpuyard.client import ServerNotVerified
from gpuyard.domain.errors import Conflict
from tests.api.test_openapi_fuzz import NEVER_ENDS
from tests.e2e.server import GPUYARD, ServerProcess, free_port, wait_for

pytestmark = pytest.mark.e2e

SECRET = "not-for-the-log-route-7f3a"


# The server fixture's (tests/e2e/conftest.py) options: two declared GPUs.
SERVER_ARGS = ("--gpus", "2", "--cpus", "8", "--kill-grace", "1")


def _token(srv: ServerProcess, name: str = "token") -> str:
    return (srv.state_dir / name).read_text().strip()


def _raw(srv: ServerProcess, method: str, target: str, headers: dict[str, str] | None = None,
         host: str | None = None) -> tuple[int, dict[str, str], bytes]:  # fmt: skip
    """One request written by hand (no client normalises the target or the Host)."""
    host = f"127.0.0.1:{srv.port}" if host is None else host
    lines = [f"{method} {target} HTTP/1.1", f"Host: {host}",
             "Connection: close", "Content-Length: 0"]  # fmt: skip
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as sock:
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    found = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in header_lines)}
    return int(status_line.split()[1]), found, body


def _authed(srv: ServerProcess) -> dict[str, str]:
    return {"Authorization": f"Bearer {_token(srv)}"}


# -- 4. paths: a job's planted symlink, a traversal corpus ---------------------------------


def test_a_log_a_job_replaced_with_a_symlink_is_refused_not_followed(
    server: ServerProcess, tmp_path: Path
) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text(SECRET + "\n")
    folder = f"{server.state_dir}/jobs/$GPUYARD_JOB_ID"
    script = f'echo hi; rm "{folder}/output.log"; ln -s "{secret}" "{folder}/output.log"'
    job_id = int(server.cli("submit", "--", "sh", "-c", script).stdout)
    server.cli("wait", str(job_id))
    assert os.path.islink(f"{server.state_dir}/jobs/{job_id}/output.log")  # the job planted it
    with pytest.raises(Conflict, match="symbolic link"):
        server.client().log(job_id)
    status, _, body = _raw(server, "GET", f"/api/v1/jobs/{job_id}/log", _authed(server))
    assert status == 409 and SECRET.encode() not in body
    cli = server.cli("logs", str(job_id), check=False)
    assert cli.returncode == 1 and SECRET not in cli.stdout + cli.stderr
    assert len(cli.stderr.strip().splitlines()) == 1 and "symbolic link" in cli.stderr


def test_a_job_folder_replaced_with_a_symlink_is_refused(
    server: ServerProcess, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "output.log").write_text(SECRET)
    job_id = int(server.cli("submit", "--", "true").stdout)
    server.cli("wait", str(job_id))
    folder = server.state_dir / "jobs" / str(job_id)
    folder.rename(tmp_path / "moved")
    folder.symlink_to(elsewhere)
    status, _, body = _raw(server, "GET", f"/api/v1/jobs/{job_id}/log", _authed(server))
    assert status == 409 and SECRET.encode() not in body and b"symbolic link" in body


_CORPUS = [
    "../../../../etc/hostname", "..%2f..%2f..%2fetc%2fhostname", "%2e%2e%2f%2e%2e%2fetc",
    "%252e%252e%252f", "/etc/hostname", "%2fetc%2fhostname", "..%00", "%00", "1%00", "1%2f..",
    "....//....//etc", "..\\..\\etc", "%c0%ae%c0%ae%2f", "1/../../../etc/hostname", "-1",
    "99999999999999999999999", "-99999999999999999999999", "1e999", "nan", "1.5", "%ff%fe",
]  # fmt: skip
_PARAM = re.compile(r"\{[^}]+\}")


def _targets(srv: ServerProcess) -> list[tuple[str, str]]:
    """Every route's path parameters and query strings, from the server's own OpenAPI (a new
    route is in the corpus without a change here), then the routes OpenAPI does not list."""
    spec = json.loads(_raw(srv, "GET", "/openapi.json")[2])
    targets: list[tuple[str, str]] = []
    for path, item in spec["paths"].items():
        if path in NEVER_ENDS:  # a stream (SSE) that never ends by itself
            continue
        for method, operation in item.items():
            if "{" in path:
                targets.append((method.upper(), _PARAM.sub("{}", path)))
            for param in operation.get("parameters", []):
                if param["in"] == "query" and param["name"] != "follow":
                    targets.append(
                        (method.upper(), f"{_PARAM.sub('1', path)}?{param['name']}={{}}")
                    )
    # Last: failed hellos are failed authentications, charged to this address.
    return [*targets, ("GET", "/{}"), ("GET", "/docs/{}"), ("GET", "/api/v1/hello?nonce={}&key={}")]


def test_a_path_traversal_corpus_gets_no_5xx_and_no_file_outside_its_root(
    server: ServerProcess,
) -> None:
    job_id = int(server.cli("submit", "--", "echo", "one log line").stdout)
    server.cli("wait", str(job_id))
    outside = [Path(p).read_bytes() for p in ("/etc/hostname", "/etc/passwd") if Path(p).exists()]
    auth = _authed(server)
    targets = _targets(server)
    assert ("POST", "/api/v1/gpus/{}/drain") in targets and (
        "GET",
        "/api/v1/jobs/{}/log",
    ) in targets
    for method, pattern in targets:
        for word in _CORPUS:
            target = pattern.replace("{}", word)
            status, _, body = _raw(server, method, target, auth)
            assert status < 500, (method, target, status, body[:300])
            assert status != 429 or "hello" in target, (target, body[:300])  # routes were reached
            assert SECRET.encode() not in body and b"root:x:0:0" not in body
            assert all(body != content for content in outside), target
    # A job's log is still served to its owner (the route works, it only refuses what it must).
    wait_for(lambda: _raw(server, "GET", "/api/v1/jobs", auth)[0] == 200, 15, 0.2)
    assert server.client().log(job_id) == b"one log line\n"


# -- 5. user text cannot forge a line of the server's log -------------------------------


def test_a_drain_reason_with_a_newline_cannot_forge_a_server_log_line(
    server: ServerProcess,
) -> None:
    server.cli("admin", "drain", "0", "--reason", "x\nFORGED gpuyard: all is well\r\x1b[2J")
    log = server.log.read_text()
    assert "FORGED" in log  # the reason is logged, escaped on its own line
    assert not any(line.startswith("FORGED") for line in log.splitlines())
    assert "\x1b" not in log and "\r" not in log
    assert "x\\nFORGED gpuyard: all is well\\r\\x1b[2J" in log


# -- 2. Host and Origin ------------------------------------------------------------------


def test_a_foreign_host_is_refused_before_authentication(server: ServerProcess) -> None:
    for host in ("evil.example", f"evil.example:{server.port}", "127.0.0.1:1", ""):
        status, _, body = _raw(server, "GET", "/healthz", host=host)
        assert status == 421, host
        message = json.loads(body)["error"]["message"]
        assert "\n" not in message and "--public-name" in message
    for host in (f"127.0.0.1:{server.port}", f"localhost:{server.port}", f"[::1]:{server.port}",
                 f"LOCALHOST:{server.port}"):  # fmt: skip
        status, _, _ = _raw(server, "GET", "/api/v1/jobs", _authed(server), host=host)
        assert status == 200, host


def test_a_public_name_is_accepted(tmp_path: Path) -> None:
    srv = ServerProcess(tmp_path / "state", "--gpus", "0", "--public-name", "gpu.lab.example")
    srv.start()
    try:
        assert _raw(srv, "GET", "/healthz", host="gpu.lab.example")[0] == 200
        assert _raw(srv, "GET", "/healthz", host="gpu.lab.example:443")[0] == 200
        assert _raw(srv, "GET", "/healthz", host="other.example")[0] == 421
    finally:
        srv.stop()


def test_a_cross_site_origin_may_read_nothing_new_and_change_nothing(
    server: ServerProcess,
) -> None:
    auth = _authed(server)
    evil = {**auth, "Origin": "http://evil.example"}
    status, _, body = _raw(server, "POST", "/api/v1/jobs/1/cancel", evil)
    assert status == 403 and b"CSRF" in body
    assert _raw(server, "POST", "/api/v1/jobs/1/cancel", {**auth, "Origin": "null"})[0] == 403
    own = {**auth, "Origin": f"http://127.0.0.1:{server.port}"}
    assert _raw(server, "POST", "/api/v1/jobs/1/cancel", own)[0] == 404  # past the check
    assert _raw(server, "GET", "/api/v1/jobs", evil)[0] == 200  # reads: the token guards them


# -- 3. failed authentication is throttled -----------------------------------------------


def test_failed_authentication_is_throttled_per_credential(server: ServerProcess) -> None:
    wrong = {"Authorization": "Bearer wrong"}
    statuses = [_raw(server, "GET", "/api/v1/jobs", wrong)[0] for _ in range(25)]
    assert statuses[:20] == [401] * 20 and set(statuses[20:]) == {429}
    status, headers, body = _raw(server, "GET", "/api/v1/jobs", wrong)
    assert status == 429 and int(headers["retry-after"]) >= 1
    assert "wait" in json.loads(body)["error"]["message"]
    # Someone else's failures never hold back a valid token from the same address (issue 23).
    assert _raw(server, "GET", "/api/v1/jobs", _authed(server))[0] == 200


# -- 6. the metrics token ----------------------------------------------------------------


def test_the_metrics_token_opens_metrics_and_nothing_else(server: ServerProcess) -> None:
    path = server.state_dir / "metrics-token"
    assert path.stat().st_mode & 0o777 == 0o600
    scraper = {"Authorization": f"Bearer {_token(server, 'metrics-token')}"}
    status, _, body = _raw(server, "GET", "/metrics", scraper)
    assert status == 200 and b"gpuyard_" in body
    assert _raw(server, "GET", "/api/v1/jobs", scraper)[0] == 401
    assert _raw(server, "GET", "/api/v1/info", scraper)[0] == 401
    assert _raw(server, "POST", "/api/v1/gpus/0/drain", scraper)[0] == 401
    assert _raw(server, "GET", "/metrics", _authed(server))[0] == 200  # the admin token too


# -- 1. binding beyond loopback ----------------------------------------------------------


def test_a_non_loopback_bind_needs_allow_remote_and_warns(tmp_path: Path) -> None:
    port = str(free_port())
    refused = subprocess.run(
        [GPUYARD, "server", "--host", "0.0.0.0", "--port", port, "--state-dir",
         str(tmp_path / "state"), "--gpus", "0"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert refused.returncode == 1
    assert len(refused.stderr.strip().splitlines()) == 1
    assert "--allow-remote" in refused.stderr and "TLS" in refused.stderr
    srv = ServerProcess(tmp_path / "state", "--host", "0.0.0.0", "--allow-remote", "--gpus", "0")
    srv.start()
    try:
        wait_for(lambda: "WARNING" in srv.log.read_text())
        log = srv.log.read_text()
        assert "TLS" in log and "reverse proxy" in log
        # Reached by this machine's name: accepted; by another name: not.
        name = socket.gethostname()
        assert _raw(srv, "GET", "/healthz", host=f"{name}:{srv.port}")[0] == 200
        assert _raw(srv, "GET", "/healthz", host=f"evil.example:{srv.port}")[0] == 421
    finally:
        srv.stop()


# -- 7. the CLI verifies the server before sending its token ------------------------------


class FakeListener:
    """What another local user could run on the configured port: it records every byte and
    answers every request 200 with a made-up proof."""

    def __init__(self, port: int = 0) -> None:
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", port))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.received = b""
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(2)
                data = b""
                try:
                    while b"\r\n\r\n" not in data and (chunk := conn.recv(65536)):
                        data += chunk
                    self.received += data
                    body = json.dumps({"proof": "00" * 32}).encode()
                    conn.sendall(
                        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                        b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
                    )
                except OSError:
                    pass

    def close(self) -> None:
        self.sock.close()


def test_the_cli_never_sends_its_token_to_a_listener_that_is_not_the_server(
    server: ServerProcess,
) -> None:
    fake = FakeListener()
    token = _token(server)
    try:
        env = dict(server.cli_env(), GPUYARD_URL=f"http://127.0.0.1:{fake.port}")
        for argv in (["queue"], ["submit", "--", "true"], ["show", "1"], ["gpus"]):
            result = subprocess.run([GPUYARD, *argv], capture_output=True, text=True, env=env,
                                    timeout=60)  # fmt: skip
            assert result.returncode == 1, argv
            assert "could not prove" in result.stderr and len(result.stderr.splitlines()) == 1
        env["GPUYARD_TOKEN"] = token
        subprocess.run([GPUYARD, "queue"], capture_output=True, env=env, timeout=60)
    finally:
        fake.close()
    assert fake.received.startswith(b"GET /api/v1/hello?")
    assert token.encode() not in fake.received
    assert urllib.parse.quote(token).encode() not in fake.received
    # The real server proves itself: the same CLI works against it.
    assert server.cli("queue").returncode == 0


def test_a_server_replaced_between_two_requests_never_gets_the_token(
    server: ServerProcess,
) -> None:
    """The SDK proves the server on every connection: a program that takes the port while the
    server restarts gets nothing, though this client spoke to the real server a moment ago."""
    client = server.client()
    assert client.jobs() == []
    server.stop()
    fake = FakeListener(server.port)
    try:
        with pytest.raises(ServerNotVerified, match="could not prove"):
            client.jobs()
    finally:
        fake.close()
    assert fake.received.startswith(b"GET /api/v1/hello?")
    assert _token(server).encode() not in fake.received
