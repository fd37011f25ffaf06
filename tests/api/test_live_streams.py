"""The live streams a dashboard page follows, over real HTTP (uvicorn with the server's own
protocol on a loopback port, the app as `gpuyard server` builds it, in-process so a second
account can be given a token): each stream delivers a change made elsewhere, and shows another
user's job only as the queue does."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from gpuyard.bootstrap import build_app
from gpuyard.domain.principal import Principal
from gpuyard.services.server import ServerFacade
from gpuyard.settings import Settings
from tests.api.served import served
from tests.e2e.test_web_dashboard import Stream, login

VIEWER = "nobody"


@dataclass
class Live:
    server: ServerFacade
    url: str
    admin_token: str
    viewer_token: str


@pytest.fixture
def live(tmp_path: Path) -> Iterator[Live]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    # The admin's browser is the state dir's token (root's here when run as root).
    settings = Settings(state_dir=tmp_path / "state", gpus="2", cpus=2, kill_grace_s=1, port=port,
                        allow_root_dashboard=True)  # fmt: skip
    server, app = build_app(settings)
    with served(server, app, "127.0.0.1", port):
        assert server.accounts is not None
        server.accounts.add_user(server.auth.principal, VIEWER)
        viewer_token, _ = server.accounts.create_token(
            Principal(VIEWER, "user", None, "submit"), scope="read"
        )
        yield Live(server, settings.url, settings.token_path.read_text().strip(), viewer_token)


def test_the_change_feed_shows_others_jobs_as_the_queue_does(live: Live) -> None:
    viewer = login(live.url, live.viewer_token)
    feed = Stream(viewer, "/api/v1/jobs/changes")
    try:
        admin = login(live.url, live.admin_token)
        made = admin.post(
            "/api/v1/jobs",
            json={"command": ["sh", "-c", "sleep 30", "secret-arg"], "workdir": "/", "name": "exp"},
        )
        assert made.status_code == 201, made.text
        job = made.json()
        _, change = feed.next_matching(lambda kind, data: data.get("id") == job["id"])
        assert (change["owner"], change["name"], change["state"]) == (
            job["owner"], "exp", job["state"],
        )  # fmt: skip
        assert "secret-arg" not in json.dumps(change) and "workdir" not in change
        assert viewer.get(f"/api/v1/jobs/{job['id']}").status_code == 404
    finally:
        feed.close()


def test_a_read_only_session_follows_the_gpus_but_cannot_drain(live: Live) -> None:
    viewer = login(live.url, live.viewer_token)
    gpus = Stream(viewer, "/api/v1/gpus/stream")
    try:
        _, first = gpus.next_matching(lambda kind, data: kind == "gpus")
        assert [g["index"] for g in first] == [0, 1]
        refused = viewer.post("/api/v1/gpus/0/drain", json={})
        assert refused.status_code == 403
        live.server.gpus.drain(0, "by the test", live.server.auth.principal)
        _, later = gpus.next_matching(lambda kind, data: data[0]["drained"])
        assert later[0]["drain_reason"] == "by the test"
    finally:
        gpus.close()
