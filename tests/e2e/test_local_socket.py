"""The root server's Unix socket (issue 11): a local user is who the kernel says (SO_PEERCRED),
with no token and no login; registered on first use unless the admin turned that off; the CLI
picks the socket when it finds one. Real Unix users, a real server, connections made by
processes that really run as those users."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuyard._http import request
from tests.e2e.server import ServerProcess
from tests.e2e.unix_users import UnixUsers

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(os.geteuid() != 0, reason="the Unix socket is a root server's"),
]

SRC = Path(__file__).resolve().parents[2] / "src"


@pytest.fixture
def place() -> Iterator[Path]:
    """A folder every user may traverse (pytest's own tmp is root's alone)."""
    folder = Path(tempfile.mkdtemp(prefix="gysock-"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _server(place: Path, *args: str) -> ServerProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUYARD_")}
    return ServerProcess(
        place / "state", "--gpus", "2", "--cpus", "8", "--kill-grace", "1",
        "--socket", str(place / "run" / "gpuyard.sock"), *args, env=env,
    ).start()  # fmt: skip


@pytest.fixture
def server(place: Path) -> Iterator[ServerProcess]:
    srv = _server(place)
    yield srv
    srv.stop()
    srv.kill_jobs()


def as_user(name: str | None, work: Callable[[], Any]) -> Any:
    """`work()` in a forked child that runs as Unix user `name` (None: root), its result
    (JSON) back through a pipe: the kernel sees that user on every connection it makes."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 0
        try:
            os.close(read_fd)
            if name is not None:
                entry = pwd.getpwnam(name)
                os.setgroups([])
                os.setgid(entry.pw_gid)
                os.setuid(entry.pw_uid)
            out = json.dumps(work()).encode()
        except BaseException as exc:
            out, code = json.dumps({"child_error": repr(exc)}).encode(), 1
        with os.fdopen(write_fd, "wb") as pipe:
            pipe.write(out)
        os._exit(code)
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as pipe:
        data = pipe.read()
    os.waitpid(pid, 0)
    result = json.loads(data)
    assert not (isinstance(result, dict) and "child_error" in result), result
    return result


def call(sock: Path, method: str, path: str, body: Any = None,
         headers: dict[str, str] | None = None) -> Callable[[], Any]:  # fmt: skip
    """A request on the socket as whoever runs it: (status, JSON answer)."""

    def work() -> Any:
        payload = json.dumps(body).encode() if body is not None else None
        sent = {"Accept": "application/json", "Content-Type": "application/json", **(headers or {})}
        resp = request("", 0, method, path, sent, payload, timeout_s=10, unix=str(sock))
        return [resp.status, json.loads(resp.read() or b"null")]

    return work


def _sock(server: ServerProcess) -> Path:
    return server.state_dir.parent / "run" / "gpuyard.sock"


def _job(name: str) -> dict[str, Any]:
    return {"command": ["sleep", "30"], "workdir": "/tmp", "name": name}


def test_the_socket_is_world_connectable_outside_the_closed_state_dir(
    server: ServerProcess,
) -> None:
    sock = _sock(server)
    assert stat.S_ISSOCK(sock.lstat().st_mode)
    assert stat.S_IMODE(sock.lstat().st_mode) == 0o666
    assert stat.S_IMODE(sock.parent.stat().st_mode) == 0o755
    assert sock.parent.stat().st_uid == 0
    assert server.state_dir not in sock.parents


def test_each_local_user_is_who_the_kernel_says_without_a_token(
    server: ServerProcess, users: UnixUsers
) -> None:
    sock = _sock(server)
    status, alice_job = as_user(users.alice, call(sock, "POST", "/api/v1/jobs", _job("a")))
    assert status == 201, alice_job
    assert alice_job["owner"] == users.alice
    status, bob_job = as_user(users.bob, call(sock, "POST", "/api/v1/jobs", _job("b")))
    assert status == 201 and bob_job["owner"] == users.bob
    # Alice sees her own job, not Bob's: his details are not found to her.
    assert as_user(users.alice, call(sock, "GET", f"/api/v1/jobs/{alice_job['id']}"))[0] == 200
    status, answer = as_user(users.alice, call(sock, "GET", f"/api/v1/jobs/{bob_job['id']}"))
    assert status == 404, answer
    status, _ = as_user(users.alice, call(sock, "POST", f"/api/v1/jobs/{bob_job['id']}/cancel"))
    assert status == 404
    # Whatever token she sends, the kernel's word wins: even the server's own admin token.
    admin_token = (server.state_dir / "token").read_text().strip()
    forged = {"Authorization": f"Bearer {admin_token}"}
    status, me = as_user(users.alice, call(sock, "GET", "/api/v1/whoami", headers=forged))
    assert status == 200 and me["user"] == users.alice and me["role"] == "user"
    # Root's connection is the server's admin.
    status, me = as_user(None, call(sock, "GET", "/api/v1/whoami"))
    assert status == 200 and me["user"] == "root" and me["role"] == "admin"
    # The job Alice submitted over the socket is hers as a Unix user too.
    with server.client() as admin:
        job = admin.job(alice_job["id"])
        assert job["owner"] == users.alice
        users_list = {u["name"]: u for u in admin.users()}
    assert users_list[users.alice]["role"] == "user"
    assert users_list[users.alice]["team"] == "default"


def test_registration_on_first_use_can_be_turned_off(place: Path, users: UnixUsers) -> None:
    srv = _server(place, "--no-register-local-users")
    try:
        sock = _sock(srv)
        status, answer = as_user(users.alice, call(sock, "GET", "/api/v1/whoami"))
        assert status == 403
        message = answer["error"]["message"]
        assert f"gpuyard admin user add {users.alice}" in message and "\n" not in message
        with srv.client() as admin:
            admin.add_user(users.alice)
            status, me = as_user(users.alice, call(sock, "GET", "/api/v1/whoami"))
            assert status == 200 and me["user"] == users.alice
            admin.disable_user(users.alice)
        status, answer = as_user(users.alice, call(sock, "GET", "/api/v1/whoami"))
        assert status == 401 and "disabled" in answer["error"]["message"]
    finally:
        srv.stop()


def test_a_default_socket_another_server_holds_is_left_to_it(
    server: ServerProcess, place: Path
) -> None:
    """A second root server asked for the same socket explicitly refuses in one line."""
    second = ServerProcess(
        place / "state2", "--gpus", "1", "--socket", str(_sock(server)),
        env={k: v for k, v in os.environ.items() if not k.startswith("GPUYARD_")},
    )  # fmt: skip
    with pytest.raises(RuntimeError, match="another server listens on"):
        second.start(timeout_s=20)


def _readable_copy(place: Path) -> Path:
    """The package where every user can read it (the venv is under root's home): the CLI's
    fast path needs the standard library only."""
    copy = place / "lib"
    shutil.copytree(SRC / "gpuyard", copy / "gpuyard",
                    ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
    subprocess.run(["chmod", "-R", "a+rX", str(copy)], check=True)
    return copy


def test_the_cli_picks_the_socket_and_sends_no_token(
    server: ServerProcess, users: UnixUsers, place: Path
) -> None:
    lib = _readable_copy(place)
    python = shutil.which("python3", path="/usr/bin:/bin")
    runuser = shutil.which("runuser", path="/usr/sbin:/usr/bin:/sbin:/bin")
    if python is None or runuser is None:
        pytest.skip("needs the system's python3 and runuser")
    entry = pwd.getpwnam(users.alice)
    env = {
        "PATH": "/usr/bin:/bin", "HOME": entry.pw_dir, "PYTHONPATH": str(lib),
        "GPUYARD_SOCKET": str(_sock(server)), "PYTHONDONTWRITEBYTECODE": "1",
    }  # fmt: skip

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        argv = [runuser, "-u", users.alice, "--", python, "-c",
                "from gpuyard.cli.main import main; main()", *args]  # fmt: skip
        return subprocess.run(argv, capture_output=True, text=True, env=env, cwd="/tmp",
                              timeout=60)  # fmt: skip

    submitted = cli("submit", "--name", "viasock", "--", "sleep", "30")
    assert submitted.returncode == 0, submitted.stderr
    job_id = int(submitted.stdout.split()[-1])
    with server.client() as admin:
        assert admin.job(job_id)["owner"] == users.alice
    queue = cli("queue", "--json")
    assert queue.returncode == 0, queue.stderr
    assert [j["id"] for j in json.loads(queue.stdout) if j["owner"] == users.alice] == [job_id]
    # Alice has no token anywhere: without the socket the CLI says so.
    env["GPUYARD_SOCKET"] = "off"
    env["GPUYARD_URL"] = server.url
    refused = cli("queue")
    assert refused.returncode == 1 and "no API token" in refused.stderr


def test_the_client_falls_back_to_tcp_when_nobody_listens_on_the_socket(
    server: ServerProcess, place: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stale socket file (a server killed with -9) is skipped: the URL is used."""
    import socket

    from gpuyard.client import Client

    stale = place / "run" / "stale.sock"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(stale))
    monkeypatch.setenv("GPUYARD_SOCKET", str(stale))
    monkeypatch.delenv("GPUYARD_URL", raising=False)
    monkeypatch.setenv("GPUYARD_STATE_DIR", str(server.state_dir))
    monkeypatch.setattr("gpuyard._connection.DEFAULT_URL", server.url)
    with Client() as c:
        assert c.url == f"unix:{stale}"
        assert c.whoami()["user"] == "root"
        assert c.url == server.url


def _hold_streams(name: str, sock: Path, count: int) -> tuple[int, list[int]]:
    """A child running as `name` that opens `count` change-feed streams on the socket and holds
    them until the returned fd is closed; with each one's HTTP status (0: closed unanswered)."""
    import socket

    read_fd, write_fd = os.pipe()
    hold_r, hold_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            os.close(read_fd)
            os.close(hold_w)
            entry = pwd.getpwnam(name)
            os.setgroups([])
            os.setgid(entry.pw_gid)
            os.setuid(entry.pw_uid)
            held, statuses = [], []
            for _ in range(count):
                conn = socket.socket(socket.AF_UNIX)
                conn.settimeout(10)
                conn.connect(str(sock))
                held.append(conn)
                try:
                    conn.sendall(b"GET /api/v1/jobs/changes HTTP/1.1\r\nHost: localhost\r\n\r\n")
                    head = conn.recv(4096)
                    statuses.append(int(head.split(b" ", 2)[1]) if head else 0)
                except OSError:
                    statuses.append(0)
            os.write(write_fd, json.dumps(statuses).encode())
            os.close(write_fd)
            os.read(hold_r, 1)  # until the test is done with them
        finally:
            os._exit(0)
    os.close(write_fd)
    os.close(hold_r)
    with os.fdopen(read_fd, "rb") as pipe:
        statuses = json.loads(pipe.read())
    return pid, statuses


def test_one_users_streams_leave_the_others_able_to_submit_list_and_cancel(
    place: Path, users: UnixUsers
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUYARD_")}
    env["GPUYARD_MAX_CONNECTIONS_PER_USER"] = "4"  # 2,100 against 2,048 once; small here
    srv = ServerProcess(
        place / "state", "--gpus", "2", "--cpus", "8", "--kill-grace", "1",
        "--socket", str(place / "run" / "gpuyard.sock"), env=env,
    ).start()  # fmt: skip
    holder = None
    try:
        sock = _sock(srv)
        holder, statuses = _hold_streams(users.bob, sock, 7)
        assert statuses[:4] == [200] * 4 and set(statuses[4:]) <= {0, 429}, statuses
        status, job = as_user(users.alice, call(sock, "POST", "/api/v1/jobs", _job("a")))
        assert status == 201, job
        status, listed = as_user(users.alice, call(sock, "GET", "/api/v1/jobs"))
        assert status == 200 and [j["id"] for j in listed] == [job["id"]]
        status, _ = as_user(users.alice, call(sock, "POST", f"/api/v1/jobs/{job['id']}/cancel"))
        assert status == 200
        assert as_user(None, call(sock, "GET", "/api/v1/whoami"))[0] == 200  # root: uncapped
    finally:
        if holder is not None:
            os.kill(holder, 9)
            os.waitpid(holder, 0)
        srv.stop()
        srv.kill_jobs()


def test_the_cli_that_looks_for_the_socket_finds_it_again_after_a_restart(
    server: ServerProcess, place: Path
) -> None:
    """A restart removes the socket and makes it again: a command typed meanwhile, which found
    no socket (and nobody on the TCP URL), waits and is answered on the new socket."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUYARD_")}
    env.update(HOME=str(place), GPUYARD_SOCKET=str(_sock(server)), GPUYARD_CLIENT_RETRY_S="240",
               GPUYARD_STATE_DIR=str(server.state_dir))  # fmt: skip
    job_id = server.client().submit(["sleep", "30"], workdir="/tmp")["id"]
    assert server.proc is not None
    server.proc.terminate()
    server.proc.wait(timeout=120)
    argv = [str(Path(sys.executable).parent / "gpuyard"), "queue", "--json"]
    with subprocess.Popen(argv, env=env, text=True, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE) as cli:  # fmt: skip
        assert cli.stdout is not None and cli.stderr is not None
        said = cli.stderr.readline()
        server.start()
        out, err = cli.stdout.read(), cli.stderr.read()
        cli.wait(timeout=300)
    assert "is not answering (restarting?); trying again for up to 240 s" in said
    assert cli.returncode == 0 and err == "", said + err
    assert [job["id"] for job in json.loads(out)] == [job_id]
