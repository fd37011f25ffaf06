"""`submit --retries` on a real server through the real CLI: a job that fails twice then
succeeds, the attempts `show` lists, `queue`'s BeginTime during a backoff and after a restart,
and a command that cannot start, which is not retried unless asked."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from tests.e2e.server import ServerProcess, wait_for

# Fails on its first two runs, succeeds on the third (it counts its runs in a file).
FLAKY = 'n=$(cat runs 2>/dev/null || echo 0); n=$((n + 1)); echo $n > runs; [ "$n" -ge 3 ]'


def serve(tmp_path: Path, backoff_s: str) -> ServerProcess:
    env = dict(os.environ, GPUYARD_RETRY_BACKOFF_S=backoff_s, GPUYARD_RETRY_BACKOFF_MAX_S="3600")
    return ServerProcess(tmp_path / "state", "--gpus", "2", "--cpus", "8", "--kill-grace", "1",
                         env=env)  # fmt: skip


@pytest.fixture
def quick(tmp_path: Path) -> Iterator[ServerProcess]:
    """Retries after 0.2 s, 0.4 s, ..."""
    srv = serve(tmp_path, "0.2").start()
    yield srv
    srv.stop()
    srv.kill_jobs()


def _at(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp()


def _ended(server: ServerProcess, job_id: str) -> dict:  # type: ignore[type-arg]
    return wait_for(  # type: ignore[no-any-return]
        lambda: (j := server.client().job(int(job_id)))["state"] not in ("PENDING", "RUNNING") and j
    )


def test_a_job_that_fails_twice_completes_on_its_third_run_and_show_lists_every_attempt(
    quick: ServerProcess, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    job_id = quick.cli("submit", "--retries", "3", "--workdir", str(work), "--", "sh", "-c",
                       FLAKY).stdout.strip()  # fmt: skip
    job = _ended(quick, job_id)
    assert (job["state"], job["exit_code"], job["restarts"]) == ("COMPLETED", 0, 2)
    assert (work / "runs").read_text().strip() == "3"
    first, second = job["attempts"]
    assert [(a["number"], a["state"], a["exit_code"]) for a in job["attempts"]] == [
        (1, "FAILED", 1), (2, "FAILED", 1),
    ]  # fmt: skip
    # Stored times: no run began before its backoff (0.2 s, then 0.4 s) had passed.
    assert _at(second["started_at"]) >= _at(first["ended_at"]) + 0.2
    assert _at(job["started_at"]) >= _at(second["ended_at"]) + 0.4
    shown = quick.cli("show", job_id).stdout
    assert "Retries: 3 on failed, 2 used" in shown
    assert "Restarts: 2 (retried 2 times)" in shown
    table = shown.split("Attempts:\n", 1)[1].splitlines()
    assert table[0].split() == ["RUN", "START", "END", "STATE", "EXIT", "NODE", "GPU_IDS",
                                "REASON"]  # fmt: skip
    rows = [line.split()[:5] for line in table[1:]]
    assert [[r[0], r[3], r[4]] for r in rows] == [["1", "FAILED", "1"], ["2", "FAILED", "1"],
                                                   ["3", "COMPLETED", "0"]]  # fmt: skip
    assert "NonZeroExitCode: exited with code 1" in table[1]


def test_a_command_that_cannot_start_is_not_retried_unless_asked(
    quick: ServerProcess, tmp_path: Path
) -> None:
    # A program submit finds (one that is not there is refused at submit) whose #! names
    # nothing: it cannot start.
    missing = str(tmp_path / "gpuyard-bad-interpreter")
    Path(missing).write_text("#!/nonexistent/interpreter\n")
    Path(missing).chmod(0o755)
    plain = quick.cli("submit", "--retries", "2", "--", missing).stdout.strip()
    job = _ended(quick, plain)
    assert (job["state"], job["exit_code"], job["attempts"]) == ("FAILED", 127, [])
    assert job["reason"].startswith("LaunchFailed: cannot run '")  # its copy, the interpreter
    assert job["reason"].endswith("No such file or directory")  # of its #! line missing
    asked = quick.cli("submit", "--retries", "1", "--retry-on", "launch", "--", missing)
    job = _ended(quick, asked.stdout.strip())
    assert [a["state"] for a in job["attempts"]] == ["FAILED"]
    assert job["attempts"][0]["reason"].startswith("LaunchFailed")
    refused = quick.cli("submit", "--retry-on", "oom", "--", "true", check=False)
    assert refused.returncode == 1
    assert refused.stderr.strip() == (
        "gpuyard: retry_on needs retries: give --retries N (how many times to try again)"
    )


def test_queue_shows_begintime_during_a_backoff_and_a_restart_keeps_it_and_the_attempts(
    tmp_path: Path,
) -> None:
    server = serve(tmp_path, "600").start()
    try:
        job_id = server.cli("submit", "--retries", "1", "--", "sh", "-c", "exit 3").stdout.strip()
        # The reason comes from the pass after the run's end is recorded: waited for too.
        waiting = wait_for(
            lambda: (j := server.client().job(int(job_id)))["reason"] == "BeginTime" and j
        )
        assert waiting["state"] == "PENDING" and len(waiting["attempts"]) == 1
        assert _at(waiting["not_before"]) >= _at(waiting["attempts"][0]["ended_at"]) + 600

        def row() -> list[str]:
            lines = server.cli("queue").stdout.splitlines()
            return next(line.split() for line in lines if line.split()[0] == job_id)

        assert row()[-1] == "(BeginTime)"
        server.kill9()
        server.start()
        again = server.client().job(int(job_id))
        assert again["attempts"] == waiting["attempts"] and again["reason"] == "BeginTime"
        assert row()[-1] == "(BeginTime)"
        assert "BeginTime: " in (shown := server.cli("show", job_id).stdout)
        assert "NonZeroExitCode: exited with code 3" in shown.split("Attempts:")[1]
        assert json.loads(server.cli("show", "--json", job_id).stdout)["not_before"]
    finally:
        server.stop()
        server.kill_jobs()


# -- NODE_FAIL through the real health path (nvidia-ml-py against the fake libnvidia-ml) --------

FAKE_GPUS = [("NVIDIA H200", 143771, f"GPU-0000000{i}-aaaa-bbbb-cccc-00000000000{i}")
             for i in range(3)]  # fmt: skip


def test_a_gpu_failure_requeues_the_job_on_a_healthy_gpu_then_holds_it_past_the_limit(
    tmp_path: Path,
) -> None:
    from tests.fakenvml import build_fake_nvml, fake_nvml_env, gcc_path, write_fake_nvml_state

    if gcc_path() is None:
        pytest.skip("gcc is needed to build fake NVML")
    nvml = build_fake_nvml(tmp_path / "nvml")
    state = tmp_path / "nvml_state"
    healthy: dict[int, dict[str, int]] = {0: {}, 1: {}, 2: {}}
    write_fake_nvml_state(state, healthy)
    env = fake_nvml_env(nvml, gpus=FAKE_GPUS, state=state, GPUYARD_TELEMETRY_S="0.2",
                        GPUYARD_NODE_FAIL_REQUEUES="1")  # fmt: skip
    server = ServerProcess(tmp_path / "state", "--kill-grace", "1", env=env).start()
    try:
        job_id = int(server.cli("submit", "--gpus", "1", "--", "sleep", "300").stdout)

        def on_gpu(excluding: set[int]) -> int:
            job = wait_for(
                lambda: (
                    (j := server.client().job(job_id))["state"] == "RUNNING"
                    and not set(j["gpus"]) & excluding
                    and j
                )
            )
            return int(job["gpus"][0])

        first = on_gpu(set())
        write_fake_nvml_state(state, {**healthy, first: {"xid": 79, "xid_events": 1}})
        second = on_gpu({first})  # requeued at once, on a healthy GPU
        job = server.client().job(job_id)
        assert [(a["state"], a["gpus"]) for a in job["attempts"]] == [("NODE_FAIL", [first])]
        assert "XID 79" in job["attempts"][0]["reason"]

        write_fake_nvml_state(state, {**healthy, first: {"xid": 79, "xid_events": 1},
                                      second: {"xid": 79, "xid_events": 1}})  # fmt: skip
        held = wait_for(  # the reason is the pass's, after the end is recorded
            lambda: (j := server.client().job(job_id))["reason"] is not None  # running: null
            and j["reason"].startswith("NodeFailLimit") and j
        )
        assert held["state"] == "PENDING" and held["held"] and len(held["attempts"]) == 2
        assert held["reason"].startswith("NodeFailLimit: 2 node failures, more than the 1")
        assert f"`gpuyard release {job_id}` runs it again" in held["reason"]
        rows = server.cli("queue").stdout.splitlines()
        assert "(NodeFailLimit: 2 node failures" in next(
            r for r in rows if r.startswith(f"{job_id} ")
        )
        server.cli("release", str(job_id))
        assert on_gpu({first, second}) == 3 - first - second  # the GPU still in service
    finally:
        server.stop()
        server.kill_jobs()
