"""/metrics names every user's jobs (issue 23): its per-job series carry the job's id, owner and
name, which another user's queue rows hide. A real root server with real Unix users on its
socket: the scraper (the metrics token) and admins read them; a plain account is refused in one
line and sees nothing of another's job."""

from __future__ import annotations

import os
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.server import ServerProcess, wait_for
from tests.e2e.test_local_socket import as_user, call, place  # noqa: F401 (a fixture)
from tests.e2e.unix_users import UnixUsers

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(os.geteuid() != 0, reason="real users on the socket need root"),
]

NAME = "alices-secret-run"


def _scrape(server: ServerProcess, token_file: str) -> str:
    token = (server.state_dir / token_file).read_text().strip()
    sent = urllib.request.Request(
        f"{server.url}/metrics", headers={"Authorization": f"Bearer {token}"}
    )
    with urllib.request.urlopen(sent, timeout=10) as answer:
        return str(answer.read().decode())


@pytest.fixture
def server(place: Path) -> Iterator[ServerProcess]:  # noqa: F811
    base = {k: v for k, v in os.environ.items() if not k.startswith("GPUYARD_")}
    srv = ServerProcess(place / "state", "--gpus", "0", "--cpus", "4", "--kill-grace", "1",
                        "--socket", str(place / "run" / "gpuyard.sock"), env=base)  # fmt: skip
    srv.start()
    yield srv
    srv.stop()
    srv.kill_jobs()


def test_another_users_job_names_are_for_the_scraper_not_for_every_account(
    server: ServerProcess,
    place: Path,  # noqa: F811
    users: UnixUsers,
) -> None:
    """Before: bob's GET /metrics was 200 with `job_name="alices-secret-run"` in it."""
    sock = place / "run" / "gpuyard.sock"
    code = "import time\nprint('::gpuyard progress step=1 total=10 loss=0.5', flush=True)\n" \
        "time.sleep(120)\n"  # fmt: skip
    body = {"command": ["/usr/bin/python3", "-c", code], "workdir": "/tmp", "name": NAME}
    status, job = as_user(users.alice, call(sock, "POST", "/api/v1/jobs", body))
    assert status == 201, job
    wait_for(lambda: NAME in _scrape(server, "metrics-token"), timeout_s=60)  # the scraper's
    for user in (users.bob, users.alice):  # plain accounts, alice's own job or not
        status, answer = as_user(user, call(sock, "GET", "/metrics"))
        assert status == 403, answer
        message = answer["error"]["message"]
        assert "scrape with the metrics token" in message and "\n" not in message
        assert NAME not in str(answer)
    assert NAME in _scrape(server, "token")  # the server's admin
