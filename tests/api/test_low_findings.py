"""The review's low findings on the HTTP side, in-process (the app as `gpuyard server` builds
it): each request a user or a stranger could send gets a 4xx in one line, never a 500."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from gpuyard.bootstrap import build_app
from gpuyard.settings import Settings


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    settings = Settings(state_dir=tmp_path / "state", gpus="1", cpus=2)
    _, app = build_app(settings)
    with TestClient(app, base_url=settings.url, raise_server_exceptions=False) as client:
        yield client


@pytest.mark.parametrize("path", ["/ui/static/x%00", "/ui/static/js/%00.js", "/ui/x%00",
                                  "/ui/static/" + "a" * 5000])  # fmt: skip
def test_a_dashboard_path_with_a_nul_byte_is_not_found_without_a_traceback(
    client: TestClient, path: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR):
        answer = client.get(path)
    assert answer.status_code in (200, 404), answer.text  # /ui/...: the app shell or a 404
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    if path.startswith("/ui/static/"):
        assert answer.status_code == 404
        assert "no dashboard file" in answer.json()["error"]["message"]
