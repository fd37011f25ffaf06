"""kill -9 of the server leaves jobs running; the restarted server re-adopts them, records the
true exit of jobs that ended meanwhile, and runs nothing twice."""

from __future__ import annotations

from pathlib import Path

from tests.e2e.server import ServerProcess, wait_ended, wait_for


def _job(tag: str, seconds: float, code: int, runs: Path, until: Path | None = None) -> list[str]:
    """Records its run, then sleeps `seconds` (or, with `until`, waits for that file: a job
    that must outlive the server's restart on a loaded machine), then exits `code`."""
    wait = f'while [ ! -e "{until}" ]; do sleep 0.05; done' if until else f"sleep {seconds}"
    return ["sh", "-c", f'echo {tag} >> "{runs}"; {wait}; exit {code}']


def test_jobs_survive_kill_9_of_the_server(server: ServerProcess, tmp_path: Path):
    runs = tmp_path / "runs"
    client = server.client()
    short = server.cli("submit", "--gpus", "2", "--", *_job("short", 0.5, 3, runs)).stdout.strip()
    go = tmp_path / "go"  # `long` runs until the test has seen it re-adopted
    long = server.cli("submit", "--gpus", "2", "--", *_job("long", 0, 0, runs, go)).stdout.strip()
    queued = server.cli("submit", "--gpus", "4", "--", *_job("queued", 0, 0, runs)).stdout.strip()
    wait_for(lambda: runs.exists() and len(runs.read_text().split()) == 2)
    assert client.job(int(queued))["state"] == "PENDING"
    gpus_before = {j: client.job(int(j))["gpus"] for j in (short, long)}

    server.kill9()
    status = server.state_dir / "jobs" / short / "status.json"
    wait_for(status.exists)  # `short` ends (exit 3) while no server runs
    server.start()
    client = server.client()

    assert client.job(int(short))["state"] == "FAILED"
    assert client.job(int(short))["exit_code"] == 3
    held = client.job(int(long))
    assert held["state"] == "RUNNING" and held["gpus"] == gpus_before[long]
    assert {g["index"]: g["job"] for g in client.gpus()}[held["gpus"][0]] == int(long)

    go.touch()
    assert server.cli("wait", long, queued).returncode == 0
    assert client.job(int(long))["exit_code"] == 0
    assert sorted(runs.read_text().split()) == ["long", "queued", "short"], "a job ran twice"


def test_cancel_after_restart_still_stops_the_adopted_job(server: ServerProcess, tmp_path: Path):
    pidfile = tmp_path / "pid"
    job_id = server.cli("submit", "--", "sh", "-c", f"echo $$ > {pidfile}; sleep 300").stdout
    job_id = job_id.strip()
    wait_for(pidfile.exists)
    server.kill9()
    server.start()
    server.cli("cancel", job_id)
    job = wait_ended(server.client(), job_id)
    assert job["state"] == "CANCELLED"


def test_acknowledged_jobs_are_never_lost(server: ServerProcess):
    ids = [
        server.cli("submit", "--gpus", "4", "--", "sleep", "30").stdout.strip() for _ in range(5)
    ]
    server.kill9()
    server.start()
    listed = {str(j["id"]): j["state"] for j in server.client().jobs()}
    assert set(ids) <= set(listed)
    assert sorted(listed.values()) == ["PENDING"] * 4 + ["RUNNING"]
    for job_id in ids:
        server.cli("cancel", job_id)
