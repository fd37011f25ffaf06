from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from gpuyard.bootstrap import build_app
from gpuyard.settings import Settings
from tests.api.served import cancel_unfinished


@pytest.fixture
def api(tmp_path: Path) -> Iterator[TestClient]:
    """The ASGI app in-process on a real SQLite store, 4 declared GPUs, authorised."""
    settings = Settings(state_dir=tmp_path / "state", gpus="4", cpus=8, kill_grace_s=1)
    server, app = build_app(settings)
    # The Host a real client of this server sends (the front door refuses any other).
    with TestClient(app, base_url=settings.url) as client:
        client.headers["Authorization"] = f"Bearer {settings.token_path.read_text().strip()}"
        client.workdir = str(tmp_path)  # type: ignore[attr-defined]
        yield client
        cancel_unfinished(server)
