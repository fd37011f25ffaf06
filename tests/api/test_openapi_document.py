"""What a client generator reads from `/openapi.json`, held to what the server does: the
security schemes (bearer token, the metrics token, the dashboard's session cookie with its
page key), applied to every operation (none on the public ones), and the media types of the
routes that do not answer JSON (a job's log, the three event streams, `/metrics`)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from fastapi.testclient import TestClient

from gpuyard.domain.principal import Principal
from tests.e2e.server import wait_for

STREAMS = ("/api/v1/jobs/changes", "/api/v1/gpus/stream", "/api/v1/events/stream")


def _operations(doc: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {
        (method.upper(), path): op
        for path, ops in doc["paths"].items()
        for method, op in ops.items()
    }


def _ok_media_types(op: dict[str, Any]) -> list[str]:
    return list(op["responses"]["200"].get("content", {}))


def test_every_operation_declares_the_credentials_the_server_really_takes(api: TestClient) -> None:
    doc = api.get("/openapi.json").json()
    schemes = doc["components"]["securitySchemes"]
    assert schemes["bearerAuth"] == {**schemes["bearerAuth"], "type": "http", "scheme": "bearer"}
    assert schemes["metricsToken"]["scheme"] == "bearer"
    port = urlsplit(str(api.base_url)).port
    cookie, key = schemes["dashboardSession"], schemes["dashboardSessionKey"]
    assert (cookie["in"], cookie["name"]) == ("cookie", f"gpuyard_session_{port}")
    assert (key["in"], key["name"]) == ("header", "X-Session-Key")
    operations = _operations(doc)
    for (method, path), op in operations.items():
        assert "security" in op, (method, path)
        for requirement in op["security"]:
            assert set(requirement) <= set(schemes), (method, path, requirement)
    public = {where for where, op in operations.items() if op["security"] == []}
    assert public == {("GET", "/healthz")}
    assert operations["GET", "/metrics"]["security"][0] == {"metricsToken": []}
    whoami = operations["GET", "/api/v1/whoami"]["security"]
    assert {"bearerAuth": []} in whoami
    assert {"dashboardSession": [], "dashboardSessionKey": []} in whoami

    token = api.headers.pop("Authorization")
    try:
        assert api.get("/healthz").status_code == 200  # public: no credential
        assert api.get("/api/v1/whoami").status_code == 401
        admin = {"Authorization": token}
        assert api.get("/api/v1/whoami", headers=admin).status_code == 200
        # The session as declared: the cookie by its declared name and the key's header
        # (a user's: root may not log in to the dashboard by default).
        created = api.post("/api/v1/admin/users", json={"name": "gydoc"}, headers=admin)
        assert created.status_code == 201, created.text
        server = api.app.state.server  # type: ignore[attr-defined]
        secret, _ = server.accounts.create_token(Principal("gydoc", "user", None, "submit"))
        login = api.post("/ui/login", data={"token": secret}, follow_redirects=False)
        assert login.status_code == 303, login.text
        session = login.cookies[cookie["name"]]
        page_key = urlsplit(login.headers["location"]).fragment.removeprefix("key=")
        api.cookies.clear()
        with_cookie = {"Cookie": f"{cookie['name']}={session}"}
        assert api.get("/api/v1/whoami", headers=with_cookie).status_code == 401  # alone: no
        both = {**with_cookie, key["name"]: page_key}
        assert api.get("/api/v1/whoami", headers=both).json()["user"] == "gydoc"
    finally:
        api.cookies.clear()
        api.headers["Authorization"] = token


def test_the_text_routes_declare_the_media_types_they_answer(api: TestClient) -> None:
    operations = _operations(api.get("/openapi.json").json())
    job = api.post(
        "/api/v1/jobs",
        json={"command": ["echo", "hello"], "workdir": api.workdir},  # type: ignore[attr-defined]
    ).json()
    wait_for(lambda: api.get(f"/api/v1/jobs/{job['id']}").json()["state"] == "COMPLETED")

    log_route = operations["GET", "/api/v1/jobs/{job_id}/log"]
    assert _ok_media_types(log_route) == ["text/plain"]
    assert {"X-Log-Start", "X-Log-Offset", "X-Job-State"} <= set(
        log_route["responses"]["200"]["headers"]
    )
    log = api.get(f"/api/v1/jobs/{job['id']}/log")
    assert log.headers["content-type"].split(";")[0] == "text/plain" and log.text == "hello\n"
    assert log.headers["X-Log-Start"] == "0" and log.headers["X-Job-State"] == "COMPLETED"

    assert _ok_media_types(operations["GET", "/metrics"]) == ["text/plain; version=0.0.4"]
    metrics = api.get("/metrics")
    assert metrics.headers["content-type"].startswith("text/plain; version=0.0.4")
    assert "# TYPE" in metrics.text

    for path in STREAMS:
        assert _ok_media_types(operations["GET", path]) == ["text/event-stream"], path
        with api.stream("GET", path) as answer:
            assert answer.status_code == 200, path
            assert answer.headers["content-type"].split(";")[0] == "text/event-stream", path
            next(answer.iter_bytes())
