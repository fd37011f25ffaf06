"""Route behaviour every client relies on: method errors say what is allowed, reading a log
past its end is not an error, and errors keep their status down the exception tree."""

from __future__ import annotations

from fastapi.testclient import TestClient

from gpuyard.api.errors import status_of
from gpuyard.domain.errors import NotFound


def test_a_wrong_method_answers_405_with_allow(api: TestClient) -> None:
    answer = api.delete("/api/v1/jobs")
    assert answer.status_code == 405
    assert "GET" in answer.headers["allow"] and "POST" in answer.headers["allow"]
    assert answer.json()["error"]["code"] == "method_not_allowed"


def test_a_log_offset_past_the_end_reads_nothing(api: TestClient) -> None:
    job = api.post("/api/v1/jobs", json={"command": ["true"], "workdir": api.workdir}).json()  # type: ignore[attr-defined]
    for offset in (10**6, 2**62):
        answer = api.get(f"/api/v1/jobs/{job['id']}/log", params={"offset": offset})
        assert answer.status_code == 200 and answer.content == b""
        assert int(answer.headers["x-log-offset"]) <= offset


def test_a_subclass_of_not_found_answers_404() -> None:
    class NoSuchGpu(NotFound):
        pass

    assert status_of(NoSuchGpu("GPU 9 is not here")) == 404


def test_history_pages_carry_a_cursor(api: TestClient) -> None:
    ids = [
        api.post("/api/v1/jobs", json={"command": ["true"], "workdir": api.workdir}).json()["id"]  # type: ignore[attr-defined]
        for _ in range(5)
    ]
    first = api.get("/api/v1/jobs", params={"all": True, "limit": 2})
    assert [j["id"] for j in first.json()] == ids[-2:]
    older = api.get(
        "/api/v1/jobs",
        params={"all": True, "limit": 2, "before_id": first.headers["x-next-before-id"]},
    )
    assert [j["id"] for j in older.json()] == ids[-4:-2]
