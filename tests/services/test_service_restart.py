"""Services on the live decision path (real journal, scheduler and SQLite, simulated time): a
service is restarted after any end but a cancel or its own time limit, with a back-off that
grows with short runs in a row, is capped, and starts over after a long run; its port is
chosen at submit, kept across restarts of the service and of the server, and never another
service's; its health check restarts it once it fails past its grace."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from gpuyard.domain.errors import Conflict
from gpuyard.domain.job import JobSpec
from gpuyard.domain.principal import Principal
from gpuyard.domain.retry import REASON_SERVICE_RESTART, REASON_UNHEALTHY
from gpuyard.domain.states import JobState
from gpuyard.scheduling.policies import make_policy
from gpuyard.services.launch.service_check import ServiceHealth
from gpuyard.services.launch.service_port import PORT_RANGE
from gpuyard.services.ports import ExitStatus
from gpuyard.settings import Settings
from tests.services.conftest import MakeRig
from tests.services.live_harness import LiveRig

BACKOFF_S, BACKOFF_MAX_S, HEALTHY_S = 2.0, 10.0, 100.0
FOREVER = 10**9  # a service's work: it never ends by itself


SETTINGS = Settings(
    service_backoff_s=BACKOFF_S, service_backoff_max_s=BACKOFF_MAX_S, service_healthy_s=HEALTHY_S
)


def make_rig(tmp_path: Path) -> LiveRig:
    """A server on `tmp_path` the test closes itself (a restart on the fixture's database)."""
    return LiveRig(tmp_path, make_policy("fifo", for_server=True), gpus=2, settings=SETTINGS)


@pytest.fixture
def rig(live_rig: MakeRig) -> LiveRig:
    return live_rig("fifo", gpus=2, settings=SETTINGS)


def serve(rig: LiveRig, **spec: object) -> int:
    return rig.submit(FOREVER, gpus=1, kind="service", **spec).id


def end_run(rig: LiveRig, job_id: int, status: ExitStatus) -> None:
    del rig.processes.runs[job_id]
    assert rig.processes.on_exit is not None
    rig.processes.on_exit(job_id, status)
    rig.settle()


def crash_at(rig: LiveRig, job_id: int, at: float, exit_code: int = 1) -> float:
    """The service's current run ends at `at`; returns when it was started again."""
    rig.now = at
    end_run(rig, job_id, ExitStatus(exit_code=exit_code, ended_at=at))
    waiting = rig.job(job_id)
    if waiting.state is JobState.PENDING:  # waits out its back-off
        assert waiting.not_before is not None
        rig.advance(waiting.not_before)
    again = rig.job(job_id)
    assert again.state is JobState.RUNNING and again.started_at is not None
    return again.started_at


def test_a_crashed_service_is_restarted_with_a_growing_capped_backoff_that_resets(
    rig: LiveRig,
) -> None:
    job_id = serve(rig)
    rig.settle()
    waits = []
    at = 0.0
    for _ in range(5):  # five crashes a second after each start: 2, 4, 8, then 10 s (capped)
        started = crash_at(rig, job_id, at + 1)
        waits.append(started - (at + 1))
        at = started
    assert waits == [2.0, 4.0, 8.0, 10.0, 10.0]
    job = rig.job(job_id)
    assert job.restarts == 5 and [a.state for a in job.attempts] == [JobState.FAILED] * 5
    assert job.attempts[-1].reason.startswith("NonZeroExitCode")
    # A run that lasted HEALTHY_S: it comes back at once, and the count starts over.
    assert crash_at(rig, job_id, at + HEALTHY_S) == at + HEALTHY_S
    at += HEALTHY_S
    assert crash_at(rig, job_id, at + 1) == at + 1 + BACKOFF_S


def test_a_service_that_exits_0_is_restarted_and_its_pending_reason_says_so(
    rig: LiveRig,
) -> None:
    job_id = serve(rig)
    rig.settle()
    rig.now = 3
    end_run(rig, job_id, ExitStatus(exit_code=0, ended_at=3))
    waiting = rig.job(job_id)
    assert waiting.state is JobState.PENDING
    assert waiting.reason.startswith(f"{REASON_SERVICE_RESTART}: restart 1 after COMPLETED")
    assert waiting.not_before == 3 + BACKOFF_S


def test_cancel_ends_a_service_for_good_running_or_waiting_out_its_backoff(
    rig: LiveRig,
) -> None:
    running, waiting = serve(rig), serve(rig)
    rig.settle()
    rig.now = 1
    end_run(rig, waiting, ExitStatus(exit_code=1, ended_at=1))
    assert rig.state(waiting) is JobState.PENDING
    rig.verbs.cancel(waiting, rig.actor)
    rig.verbs.cancel(running, rig.actor)
    rig.settle()
    assert rig.state(running) is JobState.CANCELLED and rig.state(waiting) is JobState.CANCELLED
    rig.advance(100)
    assert rig.state(running) is JobState.CANCELLED and rig.state(waiting) is JobState.CANCELLED


def test_a_service_that_reaches_its_own_time_limit_ends_timeout(rig: LiveRig) -> None:
    job_id = serve(rig, time_limit_s=60)
    rig.settle()
    rig.now = 60
    end_run(rig, job_id, ExitStatus(exit_code=None, signal=15, timed_out=True, ended_at=60))
    assert rig.state(job_id) is JobState.TIMEOUT


def test_its_gpus_count_like_any_jobs(rig: LiveRig) -> None:
    serve(rig), serve(rig)
    batch = rig.submit(5, gpus=1)
    rig.settle()
    assert rig.state(batch.id) is JobState.PENDING  # both GPUs are the services'


def test_the_port_is_chosen_at_submit_given_in_the_env_and_kept_across_restarts(
    rig: LiveRig, tmp_path: Path
) -> None:
    first, second = serve(rig), serve(rig)
    rig.settle()
    port = rig.job(first).spec.service_port
    assert PORT_RANGE[0] <= port <= PORT_RANGE[1]
    assert rig.job(second).spec.service_port not in (0, port)
    crash_at(rig, first, 1)
    envs = rig.processes.envs[first]
    assert [(e["PORT"], e["GPUYARD_SERVICE_PORT"]) for e in envs] == [(str(port), str(port))] * 2
    # A server restarted on the same database: the same port, and no new service gets it.
    rig.close()
    again = make_rig(tmp_path)
    try:
        assert again.job(first).spec.service_port == port
        taken = {port, again.job(second).spec.service_port}
        fresh = {again.submit(FOREVER, kind="service").spec.service_port for _ in range(20)}
        assert not fresh & taken and len(fresh) == 20
    finally:
        again.close()


def test_a_port_another_service_holds_is_refused_in_one_line(rig: LiveRig) -> None:
    port = rig.job(serve(rig)).spec.service_port
    with pytest.raises(Conflict, match=f"port {port} is held by service 1"):
        serve(rig, service_port=port)
    batch = rig.submit(1)
    rig.settle()
    assert "PORT" not in rig.processes.envs[batch.id][0]


def test_an_idempotent_retry_of_an_auto_port_submit_answers_the_same_service(
    rig: LiveRig,
) -> None:
    import asyncio

    spec = JobSpec(argv=("serve",), name="s", workdir="/", kind="service")
    made, replayed = asyncio.run(rig.submits.submit_once_async(spec, Principal("ada"), "k1"))
    again, replayed = asyncio.run(rig.submits.submit_once_async(spec, Principal("ada"), "k1"))
    assert replayed and again.id == made.id and made.spec.service_port != 0


def test_the_health_check_restarts_a_service_failing_past_its_grace_once_per_run(
    rig: LiveRig,
) -> None:
    job_id = serve(rig, health_grace_s=10, health_path="/health")
    rig.settle()
    answers: list[str | None] = []
    asked: list[tuple[str, int, str]] = []

    def check(host: str, port: int, path: str, timeout_s: float) -> str | None:
        asked.append((host, port, path))
        return answers.pop(0)

    mono = [0.0]
    health = ServiceHealth(
        rig.book, lambda job, why: rig.stops.request(job.id, JobState.PENDING, why),
        failures=3, check=check, clock=rig.clock, monotonic=lambda: mono[0],
    )  # fmt: skip
    rig.health = health
    job = rig.job(job_id)
    assert health.of(job) is not None and health.of(job).state == "starting"  # type: ignore[union-attr]
    # Refused for 9 s (within its grace): starting, never restarted.
    for t in range(0, 10, 3):
        mono[0] = rig.now = t
        answers.append("connection refused")
        health.check_once()
    state = health.of(rig.job(job_id))
    assert state is not None and (state.state, state.failures) == ("starting", 4)
    assert asked[0] == ("127.0.0.1", job.spec.service_port, "/health")
    mono[0] = rig.now = 11
    answers.append(None)
    health.check_once()
    state = health.of(rig.job(job_id))
    assert state is not None and (state.state, state.since, state.failures) == ("healthy", 11, 0)
    for t in (12, 13, 14):
        mono[0] = rig.now = t
        answers.append("HTTP 503 from /health")
        health.check_once()
    stopping = rig.job(job_id)
    assert stopping.stop_intent is JobState.PENDING
    assert stopping.reason.startswith(f"{REASON_UNHEALTHY}: 3 health checks of http://127.0.0.1:")
    health.check_once()  # a stopping service is not asked again
    assert not answers and len(asked) == 8
    # Signalled once the intent was on disk: it stopped, is requeued with a back-off and runs
    # again, `starting` anew.
    assert rig.processes.stops == [job_id]
    rig.settle()
    waiting = rig.job(job_id)
    assert waiting.state is JobState.PENDING and waiting.not_before == 14 + BACKOFF_S
    assert waiting.attempts[-1].state is JobState.FAILED
    assert waiting.attempts[-1].reason.startswith(REASON_UNHEALTHY)
    rig.advance(14 + BACKOFF_S)
    again = health.of(rig.job(job_id))
    assert rig.state(job_id) is JobState.RUNNING and again is not None
    assert (again.state, again.failures) == ("starting", 0)


def test_an_array_of_services_gives_each_task_its_own_port(rig: LiveRig) -> None:
    spec = JobSpec(argv=("serve",), name="s", workdir="/", kind="service")
    tasks = rig.submits.submit_array([spec] * 3, [0, 1, 2], Principal("ada"))
    assert len({task.spec.service_port for task in tasks} - {0}) == 3
    fixed = dataclasses.replace(spec, service_port=PORT_RANGE[1] + 1)  # no auto port's
    with pytest.raises(Conflict, match="held by service another task of this array"):
        rig.submits.submit_array([fixed] * 2, [0, 1], Principal("ada"))
