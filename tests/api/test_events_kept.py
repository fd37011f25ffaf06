"""The dashboard's events page after a restart: the events before it are still listed (kept
in the store, bounded), ids go on from the last, and a drain still in force is not told twice."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from gpuyard.bootstrap import build_app
from gpuyard.settings import Settings


def _life(settings: Settings, *actions: str) -> list[tuple[object, ...]]:
    """Start a server on `settings`, POST each of `actions` (e.g. "1/drain"), list the events
    as (id, kind, gpu), stop it."""
    _, app = build_app(settings)
    with TestClient(app, base_url=settings.url) as client:
        client.headers["Authorization"] = f"Bearer {settings.token_path.read_text().strip()}"
        for action in actions:
            done = client.post(f"/api/v1/gpus/{action}", json={"reason": "fan noise"})
            assert done.status_code == 200, done.text
        events = client.get("/api/v1/events").json()
    return [(e["id"], e["kind"], e["gpu"]) for e in events]


def test_the_events_page_lists_the_events_of_before_a_restart(tmp_path: Path) -> None:
    settings = Settings(state_dir=tmp_path / "state", gpus="4", cpus=8, kill_grace_s=1)
    first = _life(settings, "1/drain", "1/resume")
    assert first == [(1, "drain", 1), (2, "resume", 1)]
    assert _life(settings) == first  # restarted: nothing new, nothing lost
    second = _life(settings, "2/drain")
    assert second == [*first, (3, "drain", 2)]
    assert _life(settings) == second  # the drain still in force: told once, not again
