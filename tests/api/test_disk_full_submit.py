"""A submit refused for a full state disk: the fast path and the FastAPI route answer the same
507 and line, and a read still answers. The state dir is a real small tmpfs, filled."""

from __future__ import annotations

import json
from pathlib import Path

from fastapi.testclient import TestClient

from gpuyard.api.app import create_app
from gpuyard.api.submit_route import SubmitFastPath
from gpuyard.bootstrap import build_app
from gpuyard.settings import Settings
from tests.small_disk import fill, full_line, small_disk


def test_both_submit_paths_answer_507_with_one_line_and_reads_still_answer(tmp_path: Path):
    with small_disk(tmp_path / "state") as disk:
        settings = Settings(state_dir=disk, gpus="1", cpus=4, kill_grace_s=1)
        server, app = build_app(settings)
        plain = create_app(server, manage_lifecycle=False)
        plain.user_middleware = [
            m for m in plain.user_middleware if getattr(m, "cls", None) is not SubmitFastPath
        ]
        auth = {"Authorization": f"Bearer {settings.token_path.read_text().strip()}"}
        body = json.dumps({"command": ["true"], "workdir": str(tmp_path)}).encode()
        headers = {"Content-Type": "application/json"}
        with (
            TestClient(app, headers=auth, base_url=settings.url) as fast,
            TestClient(plain, headers=auth, base_url=settings.url) as slow,
        ):
            filler = fill(disk)
            answers = [c.post("/api/v1/jobs", content=body, headers=headers) for c in (fast, slow)]
            for resp in answers:
                assert resp.status_code == 507
                assert resp.json() == {
                    "error": {"code": "state_disk_full", "message": full_line(disk)}
                }
            assert fast.get("/api/v1/jobs").status_code == 200
            filler.unlink()
            assert fast.post("/api/v1/jobs", content=body, headers=headers).status_code == 201
            assert slow.post("/api/v1/jobs", content=body, headers=headers).status_code == 201
            for job in fast.get("/api/v1/jobs").json():
                fast.post(f"/api/v1/jobs/{job['id']}/cancel")
