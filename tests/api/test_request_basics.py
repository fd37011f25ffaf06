"""What someone calling the API by hand (curl) meets first: the auth scheme in any case, the
API's documentation open without a token (and nothing else), and a body that is not a job
refused with a 422 that says how to send one, on the fast path and the FastAPI route alike."""

from __future__ import annotations

import json
import re

import pytest
from fastapi.testclient import TestClient

from tests.api.test_submit_route import clients  # noqa: F401  (the fixture)

SEND_JSON = 'send it with Content-Type: application/json, e.g. {"command": ["python", "train.py"]}'


def test_the_auth_scheme_is_case_insensitive(api: TestClient) -> None:
    token = api.headers["Authorization"].split(" ", 1)[1]
    for scheme in ("Bearer", "bearer", "BEARER", "bEaReR"):
        answer = api.get("/api/v1/jobs", headers={"Authorization": f"{scheme} {token}"})
        assert answer.status_code == 200, scheme
    for wrong in (f"Basic {token}", f"Bearer {token}x", f"Bearer{token}", token, "bearer "):
        answer = api.get("/api/v1/jobs", headers={"Authorization": wrong})
        assert answer.status_code == 401, wrong
        assert answer.json()["error"]["code"] == "unauthorized"


@pytest.mark.parametrize("path", ["/docs", "/redoc", "/openapi.json", "/healthz"])
def test_the_api_documentation_is_open_and_nothing_else(api: TestClient, path: str) -> None:
    """Open by choice (docs/cli.md says so): the schema names routes and fields, no job,
    user or token; everything under /api and /metrics needs the token."""
    assert api.get(path, headers={"Authorization": ""}).status_code == 200
    for closed in ("/api/v1/jobs", "/api/v1/gpus", "/api/v1/info", "/metrics"):
        assert api.get(closed, headers={"Authorization": ""}).status_code == 401, closed


@pytest.mark.parametrize(
    ("body", "headers", "message"),
    [
        (b"", {"Content-Type": "application/json"}, f"the request body is empty: {SEND_JSON}"),
        (b"", {}, f"the request body is empty: {SEND_JSON}"),
        (b'{"command": ["true"]}', {"Content-Type": "text/plain"},
         f"the request body must be a JSON object: {SEND_JSON}"),
        (b'{"command": ["true"]}', {}, f"the request body must be a JSON object: {SEND_JSON}"),
        (b"[1]", {"Content-Type": "application/json"},
         f"the request body must be a JSON object: {SEND_JSON}"),
    ],
)  # fmt: skip
def test_a_body_that_is_not_a_job_says_how_to_send_one(
    clients: tuple[TestClient, TestClient],  # noqa: F811
    body: bytes,
    headers: dict[str, str],
    message: str,
) -> None:
    for client in clients:
        for path in ("/api/v1/jobs", "/api/v1/jobs/dry-run"):
            answer = client.post(path, content=body, headers=headers)
            assert answer.status_code == 422, path
            assert answer.json() == {"error": {"code": "invalid_request", "message": message}}


def test_a_body_that_cannot_be_decoded_is_a_400_in_words(
    clients: tuple[TestClient, TestClient],  # noqa: F811
) -> None:
    for client in clients:
        answer = client.post("/api/v1/jobs", content=b'{"command": ["\xff"]}',
                             headers={"Content-Type": "application/json"})  # fmt: skip
        assert answer.status_code == 400
        assert "could not be decoded as JSON" in json.dumps(answer.json())


def test_the_root_url_sends_a_browser_to_the_dashboard_and_tells_a_client_where_things_are(
    api: TestClient,
) -> None:
    browser = {"Authorization": "", "Accept": "text/html,application/xhtml+xml,*/*;q=0.8"}
    sent = api.get("/", headers=browser, follow_redirects=False)
    assert (sent.status_code, sent.headers["location"]) == (303, "/ui/")
    told = api.get("/", headers={"Authorization": ""})
    assert told.status_code == 200 and told.json()["dashboard"] == "/ui/"


@pytest.mark.parametrize("path", ["/docs", "/redoc"])
def test_the_docs_pages_load_their_scripts_from_this_server_not_a_cdn(
    api: TestClient, path: str
) -> None:
    page = api.get(path, headers={"Authorization": ""}).text
    scripts = re.findall(r'<(?:script|link)[^>]+(?:src|href)="([^"]+)"', page)
    assert scripts and all(url.startswith("/docs/") for url in scripts), scripts
    for url in scripts:
        asset = api.get(url, headers={"Authorization": ""})
        assert asset.status_code == 200 and len(asset.content) > 500, url
