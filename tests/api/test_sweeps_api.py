"""Sweeps over HTTP (in-process, real SQLite, real supervisors): a sweep's trials become one
job array with their parameters; the sweep is shown and listed to its owner only; a bad sweep
is a 422 naming the key; a sweep survives a server restart."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from gpuyard.bootstrap import build_app
from gpuyard.settings import Settings
from tests.api.test_tokens_accounts import _BASE, Rig, _add_user
from tests.api.test_tokens_accounts import rig as rig  # the fixture


def _sweep(**changes: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "name": "grid",
        # Held PENDING: each trial wants more CPUs than free while the blocker runs.
        "command": ["sleep", "{secs}"],
        "parameters": {"secs": [30, 31], "size": ["s", "m"]},
        "max_running": 1,
        "resources": {"cpus": 3},
        "metric": {"name": "val_loss", "goal": "minimize"},
        "early_stop": {"rule": "median", "min_steps": 5, "min_trials": 2},
    }
    doc.update(changes)
    return doc


def _block(rig: Rig, client: TestClient) -> None:
    """A job holding 2 of the server's 4 CPUs: no trial of 3 CPUs starts."""
    body = {"command": ["sleep", "60"], "cpus": 2, "workdir": rig.workdir}
    assert client.post("/api/v1/jobs", json=body).status_code == 201


def test_a_sweep_is_one_array_of_its_trials_with_their_parameters(rig: Rig) -> None:
    client = rig.admin()
    _block(rig, client)
    made = client.post("/api/v1/sweeps", json={"sweep": _sweep(), "workdir": rig.workdir})
    assert made.status_code == 201, made.text
    sweep = made.json()
    assert (sweep["name"], sweep["trial_count"], sweep["method"]) == ("grid", 4, "grid")
    assert (sweep["max_running"], sweep["metric"], sweep["goal"]) == (1, "val_loss", "minimize")
    assert sweep["early_stop"] == "median (min_steps 5, min_trials 2)"
    trials = sweep["trials"]
    assert [t["index"] for t in trials] == [0, 1, 2, 3]  # nothing reported: in trial order
    assert [t["params"] for t in trials] == [
        {"secs": 30, "size": "s"}, {"secs": 30, "size": "m"},
        {"secs": 31, "size": "s"}, {"secs": 31, "size": "m"},
    ]  # fmt: skip
    assert [t["task"] for t in trials] == [f"{sweep['id']}_{i}" for i in range(4)]
    for trial in trials:
        job = client.get(f"/api/v1/jobs/{trial['job_id']}").json()
        assert (job["array_job_id"], job["array_task_id"]) == (sweep["id"], trial["index"])
        assert job["command"] == ["sleep", str(trial["params"]["secs"])]
        assert (job["cpus"], job["array_max_running"], job["workdir"]) == (3, 1, rig.workdir)
        assert job["state"] == "PENDING" and trial["best"] is None and trial["reason"] is None
    shown = client.get(f"/api/v1/sweeps/{sweep['id']}").json()
    assert shown["states"] == {"PENDING": 4} and len(shown["trials"]) == 4
    listed = client.get("/api/v1/sweeps").json()
    assert [(s["id"], s["trials"]) for s in listed] == [(sweep["id"], [])]


def test_another_users_sweep_does_not_exist_for_them(rig: Rig) -> None:
    client = rig.admin()
    _block(rig, client)
    sweep = client.post("/api/v1/sweeps", json={"sweep": _sweep(), "workdir": rig.workdir})
    sweep_id = sweep.json()["id"]
    assert _add_user(rig, "nobody").status_code == 201
    other = rig.as_(rig.token_of("nobody"))
    missing = other.get(f"/api/v1/sweeps/{sweep_id}")
    assert missing.status_code == 404
    assert missing.json()["error"]["message"].startswith(f"sweep {sweep_id} not found")
    assert other.get("/api/v1/sweeps").json() == []
    assert len(rig.admin().get("/api/v1/sweeps", params={"all": "true"}).json()) == 1
    assert rig.admin().get("/api/v1/sweeps/99999").status_code == 404
    assert rig.admin().get("/api/v1/sweeps/0").status_code == 404


def test_a_bad_sweep_is_a_422_naming_the_key_and_queues_nothing(rig: Rig) -> None:
    client = rig.admin()
    for doc, field, words in [
        (_sweep(parameters={"secs": {"distribution": "uniform", "min": 1, "max": 2}}),
         "parameters.secs", 'method = "random"'),
        (_sweep(resources={"gpus": 99}), "gpus", "this server has 2 GPUs"),
        (_sweep(command="sleep {nope}"), "command", "{nope} names no parameter"),
        ({"parameters": {"x": [1]}}, "command", "missing"),
    ]:  # fmt: skip
        answer = client.post("/api/v1/sweeps", json={"sweep": doc, "workdir": rig.workdir})
        assert answer.status_code == 422, answer.text
        error = answer.json()["error"]
        assert words in error["message"] and "\n" not in error["message"], error
        assert error["field"] == field, error
    missing_dir = client.post("/api/v1/sweeps", json={"sweep": _sweep(), "workdir": "/no/such"})
    assert missing_dir.status_code == 422
    assert client.get("/api/v1/jobs").json() == [] and client.get("/api/v1/sweeps").json() == []


def test_a_sweep_is_kept_across_a_restart(tmp_path: Path) -> None:
    settings = Settings(state_dir=tmp_path / "state", gpus="1", cpus=2, kill_grace_s=1)
    token = None
    for round_ in (1, 2):
        _, app = build_app(settings)
        with TestClient(app, base_url=_BASE) as client:
            token = token or settings.token_path.read_text().strip()
            client.headers["Authorization"] = f"Bearer {token}"
            if round_ == 1:
                doc = _sweep(resources={"cpus": 3})  # never fits: stays pending
                made = client.post("/api/v1/sweeps", json={"sweep": doc, "workdir": str(tmp_path)})
                assert made.status_code == 422  # 3 CPUs on a 2-CPU server: refused
                doc = _sweep(resources={"cpus": 1}, command=["sleep", "{secs}"])
                made = client.post("/api/v1/sweeps", json={"sweep": doc, "workdir": str(tmp_path)})
                assert made.status_code == 201, made.text
                sweep_id = made.json()["id"]
            else:
                shown = client.get(f"/api/v1/sweeps/{sweep_id}").json()
                assert shown["trial_count"] == 4 and shown["metric"] == "val_loss"
                assert sorted(t["index"] for t in shown["trials"]) == [0, 1, 2, 3]
                assert client.post(f"/api/v1/arrays/{sweep_id}/cancel").status_code == 200
