"""The webhook routes in-process (real SQLite store, real receiver on loopback, which this
server allows): settings set, shown and cleared, the secret shown once, a team's defaults an
admin's to set, the delivery log showing a URL's host only, a ping."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from gpuyard.bootstrap import build_app
from gpuyard.domain.principal import Principal
from gpuyard.services.server import ServerFacade
from gpuyard.settings import Settings
from tests.e2e.server import wait_for
from tests.webhook_receiver import Receiver, receiver


@pytest.fixture
def hook() -> Iterator[Receiver]:
    with receiver() as r:
        yield r


@pytest.fixture
def api(tmp_path: Path) -> Iterator[TestClient]:
    settings = Settings(state_dir=tmp_path / "state", gpus="2", cpus=4, notify_allow="loopback")
    server, app = build_app(settings)
    with TestClient(app, base_url=settings.url) as client:
        client.headers["Authorization"] = f"Bearer {settings.token_path.read_text().strip()}"
        client.server = server  # type: ignore[attr-defined]
        yield client


def member(api: TestClient, name: str, team: str) -> dict[str, str]:
    """A user of `team` (a Unix user every Linux has: a root server runs jobs as their
    owners), with a token made as `gpuyard token create` makes it."""
    made = api.post("/api/v1/admin/users", json={"name": name, "team": team})
    assert made.status_code == 201, made.text
    server: ServerFacade = api.server  # type: ignore[attr-defined]
    assert server.accounts is not None
    token, _ = server.accounts.create_token(Principal(name, "user", team, "submit"))
    return {"Authorization": f"Bearer {token}"}


def test_settings_secret_and_log(api: TestClient, hook: Receiver) -> None:
    url = hook.url + "?token=chat-secret"
    assert api.get("/api/v1/notify").json() == []
    first = api.put("/api/v1/notify", json={"urls": [url], "events": ["begin", "end"]})
    assert first.status_code == 200, first.text
    body = first.json()
    assert body["urls"] == [url] and body["events"] == ["begin", "end"]
    assert body["secret_set"] and body["secret"].startswith("whsec_")
    again = api.put("/api/v1/notify", json={"urls": [url]}).json()
    assert again["secret"] is None and again["secret_set"]  # shown once
    (shown,) = api.get("/api/v1/notify").json()
    assert "secret" not in shown or shown["secret"] is None
    rotated = api.post("/api/v1/notify/secret")
    assert rotated.status_code == 201 and rotated.json()["secret"] != body["secret"]
    ping = api.post("/api/v1/notify/test", json={})
    assert ping.status_code == 202, ping.text
    (made,) = ping.json()
    (got,) = hook.wait(1)
    assert got.verifies(rotated.json()["secret"]) and got.event == "ping"
    wait_for(lambda: api.get("/api/v1/notify/deliveries").json()[0]["state"] == "delivered")
    (entry,) = api.get("/api/v1/notify/deliveries").json()
    assert entry["id"] == made["id"] and entry["host"] == f"127.0.0.1:{hook.port}"
    assert "chat-secret" not in str(entry)
    assert api.delete("/api/v1/notify").status_code == 204
    assert api.get("/api/v1/notify").json()[0]["urls"] == []
    assert api.delete("/api/v1/notify").status_code == 204  # nothing left to clear: fine
    missing = api.post("/api/v1/notify/test", json={})
    assert missing.status_code == 404 and "gpuyard notify set URL" in missing.text


def test_bad_input_is_one_line_4xx(api: TestClient) -> None:
    bad = api.put("/api/v1/notify", json={"urls": ["ftp://x"]})
    assert bad.status_code == 422 and "http(s)" in bad.text
    bad = api.put("/api/v1/notify", json={"urls": ["https://a.example/x"], "events": ["soon"]})
    assert bad.status_code == 422 and "begin, end, fail" in bad.text
    bad = api.put("/api/v1/notify", json={"urls": []})
    assert bad.status_code == 422 and "at least one URL" in bad.text
    own = api.put("/api/v1/notify", json={"urls": [f"{api.base_url}/api/v1/jobs"]})
    assert own.status_code == 422 and "own API" in own.text
    meta = api.put("/api/v1/notify", json={"urls": ["http://169.254.169.254/latest"]})
    assert meta.status_code == 422 and "GPUYARD_NOTIFY_ALLOW" in meta.text


def test_a_teams_defaults_are_an_admins_and_its_members_see_their_host(
    api: TestClient, hook: Receiver
) -> None:
    assert api.post("/api/v1/admin/teams", json={"name": "vision"}).status_code == 201
    ada = member(api, "nobody", "vision")
    missing = api.put("/api/v1/notify?team=nosuch", json={"urls": [hook.url]})
    assert missing.status_code == 404 and "gpuyard admin team add nosuch" in missing.text
    refused = api.put("/api/v1/notify?team=vision", json={"urls": [hook.url]}, headers=ada)
    assert refused.status_code == 403 and "only an admin" in refused.text
    team = api.put("/api/v1/notify?team=vision", json={"urls": [hook.url + "/t?k=s"]})
    assert team.status_code == 200 and team.json()["kind"] == "team"
    (seen,) = api.get("/api/v1/notify", headers=ada).json()
    assert (seen["kind"], seen["name"], seen["urls"]) == (
        "team", "vision", [f"127.0.0.1:{hook.port}"]
    )  # fmt: skip
    # nobody's job names no URL: their team's default gets its end, signed with the team's secret.
    job = api.post("/api/v1/jobs", json={"command": ["true"], "workdir": "/"}, headers=ada)
    assert job.status_code == 201, job.text
    (got,) = hook.wait(1)
    assert got.path == "/hook/t?k=s" and got.event == "end" and got.verifies(team.json()["secret"])
