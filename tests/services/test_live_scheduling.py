"""The live server schedules with the same policies as `gpuyard simulate`, and the same way."""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

import pytest

from gpuyard.domain.job import REASON_PREEMPTED, REASON_PREEMPTING, Job, JobSpec
from gpuyard.domain.states import JobState
from gpuyard.scheduling.cluster import ClusterState, NodeSpec
from gpuyard.scheduling.policies import make_policy
from gpuyard.simulation.engine import Replay
from gpuyard.simulation.trace import TraceJob
from tests.services.live_harness import LiveRig, Recording

LIVE_POLICIES = ["fifo", "backfill", "fairshare", "las", "default"]


def contended_trace(seed: int, jobs: int = 60) -> list[TraceJob]:
    """Jobs of three users on 8 GPUs: bursts of arrivals, short and long jobs, some big."""
    rng = random.Random(seed)
    trace, t = [], 0
    for job_id in range(1, jobs + 1):
        t += rng.choice([0, 0, 30, 120, 600])
        long = rng.random() < 0.3
        duration = rng.randint(4_000, 20_000) if long else rng.randint(10, 900)
        gpus = rng.choice([1, 1, 1, 2, 4, 8])
        trace.append(TraceJob(job_id, rng.choice("abc"), float(t), gpus, float(duration),
                              time_limit_s=float(duration)))  # fmt: skip
    return trace


def limited_trace(seed: int) -> list[TraceJob]:
    """`contended_trace` with every third job's limit half its duration: killed there."""
    return [replace(t, time_limit_s=float(int(t.duration_s) // 2 or 1)) if t.id % 3 == 0 else t
            for t in contended_trace(seed)]  # fmt: skip


def simulated_events(
    trace: list[TraceJob], policy: str, gpus: int, timed_out: set[int] | None = None
) -> list[tuple[str, float, int]]:
    recorder = Recording(make_policy(policy))
    cluster = ClusterState([NodeSpec("node0", gpus)])
    result = Replay(trace, recorder, cluster, restart_penalty_s=0.0).run()  # type: ignore[arg-type]
    if timed_out is not None:
        timed_out.update(j.id for j in result.jobs if j.timed_out)
    return recorder.events


def live_events(
    tmp_path: Path, trace: list[TraceJob], policy: str, gpus: int,
    timed_out: set[int] | None = None,
) -> list[tuple[str, float, int]]:  # fmt: skip
    """The policy's events on the live path; `timed_out` gets the jobs that ended TIMEOUT."""
    recorder = Recording(make_policy(policy, for_server=True))
    rig = LiveRig(tmp_path, recorder, gpus)  # type: ignore[arg-type]

    def submit(arrivals: list[TraceJob]) -> None:
        t = arrivals.pop(0)
        limit = int(t.time_limit_s) if t.time_limit_s else None
        job = rig.submit(t.duration_s, user=t.user, gpus=t.gpus, time_limit_s=limit,
                         preemptible=t.preemptible)  # fmt: skip
        assert job.id == t.id

    try:
        rig.replay(trace, submit)
        states = {j.id: j.state for j in rig.book.jobs(include_finished=True)}
        assert set(states.values()) <= {JobState.COMPLETED, JobState.TIMEOUT}
        if timed_out is not None:
            timed_out.update(i for i, state in states.items() if state is JobState.TIMEOUT)
        return recorder.events
    finally:
        rig.close()


def mixed_trace(seed: int) -> list[TraceJob]:
    """`contended_trace` with every other job not preemptible and every third without a
    limit: `default` ranks those by predicted run with halvings and reserves room for them."""
    return [replace(t, preemptible=t.id % 2 == 1,
                    time_limit_s=None if t.id % 3 == 0 else t.time_limit_s)
            for t in contended_trace(seed)]  # fmt: skip


@pytest.mark.parametrize("seed", [7, 18, 25])
@pytest.mark.parametrize("policy", LIVE_POLICIES)
def test_jobs_that_may_not_be_preempted_make_the_same_decisions_live_and_simulated(
    tmp_path: Path, policy: str, seed: int
) -> None:
    """Issue 25: the predictor-ranked keys, their halvings, the reservations and the jobs that
    use a reserved node by their limit, live as simulated."""
    trace = mixed_trace(seed)
    simulated = simulated_events(trace, policy, gpus=8)
    live = live_events(tmp_path, trace, policy, gpus=8)
    assert live == simulated


@pytest.mark.parametrize("seed", [0, 2, 3, 7])
@pytest.mark.parametrize("policy", LIVE_POLICIES)
def test_jobs_killed_at_their_limits_make_the_same_decisions_live_and_simulated(
    tmp_path: Path, policy: str, seed: int
) -> None:
    """Issue 25: on these traces `default` picked other victims live than simulated (2, 3, 7)
    and `fairshare` reranked at other times (0): the simulator ran passes at wake-ups the
    policy no longer asked for, which moved `default`'s cached estimates and `fairshare`'s
    recalculation times."""
    trace = limited_trace(seed)
    simulated_timeouts: set[int] = set()
    live_timeouts: set[int] = set()
    simulated = simulated_events(trace, policy, 8, simulated_timeouts)
    live = live_events(tmp_path, trace, policy, 8, live_timeouts)
    assert live == simulated
    assert live_timeouts == simulated_timeouts and len(live_timeouts) >= 5


@pytest.mark.parametrize("seed", [7, 18, 25])
@pytest.mark.parametrize("policy", LIVE_POLICIES)
def test_live_server_and_simulator_make_the_same_decisions(
    tmp_path: Path, policy: str, seed: int
) -> None:
    """Seed 18: the simulator's stale wake-ups (issue 25); 25: two runs ending at one instant
    (they must reach the policy in the same order)."""
    trace = contended_trace(seed)
    simulated = simulated_events(trace, policy, gpus=8)
    live = live_events(tmp_path, trace, policy, gpus=8)
    assert len(simulated) >= 3 * len(trace)  # submit, started, finished at least
    assert live == simulated
    if policy in ("las", "default"):
        assert any(kind == "preempted" for kind, _, _ in live), "the trace must exercise preemption"


# -- live preemption, priorities, --no-preempt --------------------------------------------------


def test_a_higher_priority_job_preempts_and_the_victim_is_requeued_with_its_service(
    tmp_path: Path,
) -> None:
    rig = LiveRig(tmp_path, make_policy("default", for_server=True), gpus=2)
    try:
        low = rig.submit(10_000, gpus=2, preemptible=True)
        rig.settle()
        assert rig.job(low.id).state is JobState.RUNNING
        rig.advance(600)
        high = rig.submit(100, gpus=1, priority=10)
        rig.settle()
        victim = rig.job(low.id)
        assert rig.processes.stops == [low.id]
        assert victim.state is JobState.PENDING and victim.reason == REASON_PREEMPTED
        assert victim.restarts == 1 and victim.attained_gpu_s == pytest.approx(2 * 600)
        assert rig.state(high.id) is JobState.RUNNING
        rig.advance(700)  # the high-priority job is done; the victim resumes
        assert rig.state(high.id) is JobState.COMPLETED
        resumed = rig.job(low.id)
        assert resumed.state is JobState.RUNNING
        first_run, second_run = rig.processes.envs[low.id]
        assert first_run["GPUYARD_RESTART_COUNT"] == "0"
        assert second_run["GPUYARD_RESTART_COUNT"] == "1"
    finally:
        rig.close()


@pytest.mark.parametrize("said", [{"preemptible": False}, {}], ids=["no-preempt", "default"])
def test_a_job_that_did_not_opt_in_is_never_preempted(
    tmp_path: Path, said: dict[str, bool]
) -> None:
    """Preemption is opt-in (issue 15): a 3-hour job without checkpoints must not be stopped
    after 4 minutes to start over, by priority or by any policy's own rank."""
    for policy in ("default", "las"):
        rig = LiveRig(tmp_path / policy, make_policy(policy, for_server=True), gpus=1)
        try:
            keep = rig.submit(10_000, gpus=1, **said)
            rig.settle()
            rig.advance(600)
            urgent = rig.submit(100, gpus=1, priority=10)
            short = rig.submit(10, gpus=1)
            rig.settle()
            rig.advance(3_600)
            assert rig.processes.stops == [], policy
            assert rig.state(keep.id) is JobState.RUNNING, policy
            assert rig.state(urgent.id) is JobState.PENDING, policy
            assert rig.reads.reason(rig.job(urgent.id)) == "Resources", policy
            assert rig.state(short.id) is JobState.PENDING, policy
        finally:
            rig.close()


def _preempting(tmp_path: Path) -> tuple[LiveRig, Job, Job]:
    """One GPU; a priority-5 job has just preempted a job that ran 600 s, whose processes have
    not stopped yet (stops are recorded, not delivered)."""
    rig = LiveRig(tmp_path, make_policy("default", for_server=True), gpus=1)
    rig.processes.stop = lambda job, sig=None: rig.processes.stops.append(job.id)  # type: ignore[method-assign]
    low = rig.submit(10_000, gpus=1, preemptible=True)
    rig.settle()
    rig.advance(600)
    high = rig.submit(100, gpus=1, priority=5)
    rig.settle()
    return rig, low, high


def test_a_job_chosen_over_a_stopping_job_waits_for_its_gpus_and_can_be_cancelled(
    tmp_path: Path,
) -> None:
    rig, low, high = _preempting(tmp_path)
    try:
        # The victim's processes have not stopped yet: nothing may run on its GPU meanwhile.
        assert rig.processes.stops == [low.id]
        assert rig.job(low.id).state is JobState.RUNNING
        assert rig.job(low.id).stop_intent is JobState.PENDING
        assert rig.state(high.id) is JobState.PENDING
        assert rig.reads.reason(rig.job(high.id)) == REASON_PREEMPTING
        rig.verbs.cancel(high.id, rig.actor)
        rig.settle()
        assert rig.state(high.id) is JobState.CANCELLED
        rig.controller.on_exit(low.id, _sigterm(rig.now))  # the victim stops now
        rig.settle()
        assert rig.job(low.id).state is JobState.RUNNING  # nothing else wants the GPU
        assert rig.job(low.id).restarts == 1
    finally:
        rig.close()


def _sigterm(at: float):  # type: ignore[no-untyped-def]
    from gpuyard.services.ports import ExitStatus

    return ExitStatus(exit_code=None, signal=15, ended_at=at)


def test_priority_orders_the_queue_in_every_live_policy(tmp_path: Path) -> None:
    for policy in LIVE_POLICIES:
        rig = LiveRig(tmp_path / policy, make_policy(policy, for_server=True), gpus=1)
        try:
            running = rig.submit(1_000, gpus=1, preemptible=False)
            rig.settle()
            low = rig.submit(10, gpus=1)
            high = rig.submit(10, gpus=1, priority=3)
            rig.settle()
            rig.advance(1_000)
            assert rig.state(running.id) is JobState.COMPLETED, policy
            assert rig.state(high.id) is JobState.RUNNING, policy
            assert rig.state(low.id) is JobState.PENDING, policy
        finally:
            rig.close()


# -- estimated start times and dry runs -------------------------------------------------------


def test_estimated_starts_assume_running_jobs_use_their_whole_time_limit(tmp_path: Path) -> None:
    rig = LiveRig(tmp_path, make_policy("fifo", for_server=True), gpus=4)
    try:
        rig.now = 1_000.0
        r = rig.submit(500, gpus=4, time_limit_s=7_200)
        rig.settle()
        a = rig.submit(60, gpus=4, time_limit_s=3_600)
        b = rig.submit(60, gpus=2)
        rig.settle()
        estimates = rig.scheduler.estimated_starts()
        assert estimates == {a.id: 1_000.0 + 7_200, b.id: 1_000.0 + 7_200 + 3_600}
        assert rig.state(r.id) is JobState.RUNNING
        assert rig.reads.reason(rig.job(a.id)) == "Resources"
        assert rig.reads.reason(rig.job(b.id)) == "Priority"
    finally:
        rig.close()


def test_no_estimate_behind_a_job_without_a_time_limit(tmp_path: Path) -> None:
    rig = LiveRig(tmp_path, make_policy("fifo", for_server=True), gpus=1)
    try:
        rig.submit(500, gpus=1)
        rig.settle()
        waiting = rig.submit(60, gpus=1, time_limit_s=60)
        rig.settle()
        assert rig.scheduler.estimated_starts() == {waiting.id: None}
    finally:
        rig.close()


def test_behind_a_job_without_a_limit_the_estimate_says_what_it_assumes(tmp_path: Path) -> None:
    """Issue 15: behind a job with no time limit, `default` estimated `~+4 min` (when it would
    preempt it) and passed that off as an ordinary estimate. A job that did not opt in to
    preemption is never preempted, so nothing frees its GPU: no estimate (`?`). Behind one
    that did, the estimate is the planned preemption, and it says so."""
    for preemptible in (False, True):
        rig = LiveRig(tmp_path / str(preemptible), make_policy("default", for_server=True), gpus=1)
        try:
            rig.now = 1_000.0
            rig.submit(50_000, gpus=1, **({"preemptible": True} if preemptible else {}))
            rig.settle()
            waiting = rig.submit(60, gpus=1, time_limit_s=60)
            behind = rig.submit(60, gpus=1, time_limit_s=60)
            rig.settle()
            estimates = rig.scheduler.start_estimates()
            if not preemptible:
                assert estimates.starts == {waiting.id: None, behind.id: None}
                assert not estimates.assumes_preemption(waiting.id)
                spec = JobSpec(argv=("x",), name="x", workdir="/", gpus=1, time_limit_s=60)
                answer = rig.submits.dry_run(spec, rig.actor)
                assert (answer.start_at, answer.assumes_preemption) == (None, False)
                continue
            # When `default` would preempt it: after 4 min of protection if it pays, else by
            # the starvation guard (an hour here: nobody has a history yet).
            assert 1_000.0 + 240 <= (estimates.starts[waiting.id] or 0) <= 1_000.0 + 3_600
            assert estimates.assumes_preemption(waiting.id)
            assert estimates.assumes_preemption(behind.id)  # it needs the same preemption
            spec = JobSpec(argv=("x",), name="x", workdir="/", gpus=1, time_limit_s=60)
            assert rig.submits.dry_run(spec, rig.actor).assumes_preemption
        finally:
            rig.close()


def test_an_estimate_that_needs_no_preemption_says_none(tmp_path: Path) -> None:
    rig = LiveRig(tmp_path, make_policy("default", for_server=True), gpus=1)
    try:
        rig.now = 1_000.0
        rig.submit(500, gpus=1, time_limit_s=600, preemptible=True)
        rig.settle()
        rig.advance(1_100.0)
        waiting = rig.submit(60, gpus=1, time_limit_s=60)
        rig.settle()
        estimates = rig.scheduler.start_estimates()
        if estimates.starts[waiting.id] == 1_000.0 + 600:  # waits for the end: no preemption
            assert not estimates.assumes_preemption(waiting.id)
        else:  # or the policy preempts sooner, and says so
            assert estimates.assumes_preemption(waiting.id)
    finally:
        rig.close()


def test_dry_run_answers_when_a_job_would_start_and_queues_nothing(tmp_path: Path) -> None:
    from gpuyard.domain.job import JobSpec

    rig = LiveRig(tmp_path, make_policy("default", for_server=True), gpus=2)
    try:
        rig.now = 50.0
        rig.submit(500, gpus=2, time_limit_s=3_000, preemptible=False)
        rig.settle()
        spec = JobSpec(argv=("x",), name="x", workdir="/", gpus=1)
        assert rig.submits.dry_run(spec, rig.actor).start_at == 50.0 + 3_000
        cpu_only = JobSpec(argv=("x",), name="x", workdir="/", gpus=0)
        assert rig.submits.dry_run(cpu_only, rig.actor).start_at == 50.0
        assert len(rig.book.jobs(include_finished=True)) == 1  # nothing was queued
        from gpuyard.domain.errors import InvalidRequest

        with pytest.raises(InvalidRequest, match="has 2 GPUs"):
            rig.submits.dry_run(JobSpec(argv=("x",), name="x", workdir="/", gpus=3), rig.actor)
    finally:
        rig.close()


@pytest.mark.parametrize("limit_s", [3_000, None])
def test_a_dry_run_names_the_cpus_it_waits_for_and_the_end_it_counts_on(
    tmp_path: Path, limit_s: int | None
) -> None:
    """GPUs idle, every CPU taken: the dry run names the CPUs (it blamed "GPUs held by jobs
    without a time limit") and the job whose end its estimate counts on (issue 26)."""
    from gpuyard.api.convert import dry_run_to_wire
    from gpuyard.cli.render import dry_run_answer
    from gpuyard.domain.job import JobSpec

    rig = LiveRig(tmp_path, make_policy("default", for_server=True), gpus=2)
    try:
        rig.now = 50.0
        blocker = rig.submit(500, gpus=0, cpus=10_000, time_limit_s=limit_s)
        rig.settle()
        spec = JobSpec(argv=("x",), name="x", workdir="/", gpus=1, cpus=1)
        answer = rig.submits.dry_run(spec, rig.actor)
        assert answer.waits_for == "CPUs (10000 of 10000 in use)"
        line = dry_run_answer(dry_run_to_wire(answer).model_dump())
        assert "GPU" not in line
        if limit_s is None:
            assert answer.start_at is None
            assert (
                "it waits for CPUs (10000 of 10000 in use), held by jobs without a time limit"
                in line
            )
        else:
            assert (answer.start_at, answer.after_jobs) == (50.0 + 3_000, (blocker.id,))
            assert f"it waits for CPUs (10000 of 10000 in use) until job {blocker.id} ends" in line
    finally:
        rig.close()


# -- restart ----------------------------------------------------------------------------------


def test_a_restarted_server_ranks_jobs_as_before(tmp_path: Path) -> None:
    """The default policy learns from finished jobs; after a restart it must still know them."""
    rig = LiveRig(tmp_path, make_policy("default", for_server=True), gpus=1)
    try:
        for _ in range(4):  # bob's jobs run 10 s, ada's 5,000 s: bob's rank first
            rig.submit(10, gpus=1, user="bob")
            rig.submit(5_000, gpus=1, user="ada")
        rig.settle()
        for _ in range(100):
            if not rig.book.jobs(include_finished=False):
                break
            rig.advance(rig.next_time())
        assert not rig.book.jobs(include_finished=False), rig.book.jobs(include_finished=False)
        blocker = rig.submit(1_000, gpus=1, user="carol", preemptible=False)
        rig.settle()
        ada = rig.submit(5_000, gpus=1, user="ada")
        bob = rig.submit(10, gpus=1, user="bob")
        rig.settle()
        before = [j.id for j in rig.policy.pending(rig.now)]
        assert before == [bob.id, ada.id]
    finally:
        rig.close()
    again = LiveRig(tmp_path, make_policy("default", for_server=True), gpus=1)
    try:
        again.now = rig.now
        again.settle()
        assert [j.id for j in again.policy.pending(again.now)] == before
        assert again.state(blocker.id) is JobState.RUNNING
    finally:
        again.close()


def test_dry_run_beyond_the_projection_budget_says_not_before_where_it_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpuyard.domain.job import JobSpec
    from gpuyard.services.scheduler import estimates

    rig = LiveRig(tmp_path, make_policy("fifo", for_server=True), gpus=1)
    try:
        rig.now = 10.0
        rig.submit(500, gpus=1, time_limit_s=100)
        rig.settle()
        monkeypatch.setattr(estimates, "DRY_RUN_BUDGET_S", 0.0)  # a "very deep queue"
        answer = rig.submits.dry_run(JobSpec(argv=("x",), name="x", workdir="/", gpus=1), rig.actor)
        assert (answer.start_at, answer.not_before) == (None, 10.0)
        monkeypatch.setattr(estimates, "DRY_RUN_BUDGET_S", 5.0)
        answer = rig.submits.dry_run(JobSpec(argv=("x",), name="x", workdir="/", gpus=1), rig.actor)
        assert (answer.start_at, answer.not_before) == (110.0, None)
    finally:
        rig.close()


def test_a_cancel_during_a_preemption_ends_the_job_instead_of_requeueing_it(
    tmp_path: Path,
) -> None:
    rig, low, _ = _preempting(tmp_path)
    try:
        assert rig.job(low.id).stop_intent is JobState.PENDING
        rig.verbs.cancel(low.id, rig.actor)  # the user cancels it during its grace period
        assert rig.job(low.id).stop_intent is JobState.CANCELLED
        rig.controller.on_exit(low.id, _sigterm(rig.now))
        rig.settle()
        assert rig.state(low.id) is JobState.CANCELLED
    finally:
        rig.close()


def test_a_preemption_whose_record_failed_is_retried_not_lost(tmp_path: Path) -> None:
    rig = LiveRig(tmp_path, make_policy("default", for_server=True), gpus=1)
    try:
        low = rig.submit(10_000, gpus=1, preemptible=True)
        rig.settle()
        rig.advance(600)
        real_write = rig.store.write
        failures = []

        def flaky(inserts, updates):  # type: ignore[no-untyped-def]
            if any(j.stop_intent is JobState.PENDING for j in updates) and not failures:
                failures.append(1)
                raise OSError("disk full")
            real_write(inserts, updates)

        rig.store.write = flaky  # type: ignore[method-assign]
        high = rig.submit(100, gpus=1, priority=5)
        rig.controller.tick()  # the journal keeps the change and retries it on the next tick
        rig.settle()
        assert failures and rig.processes.stops == [low.id]
        assert rig.state(low.id) is JobState.PENDING and rig.state(high.id) is JobState.RUNNING
    finally:
        rig.close()


def test_a_server_restarted_with_fewer_gpus_than_its_running_jobs_hold_says_so(
    tmp_path: Path,
) -> None:
    from gpuyard.domain.errors import Unavailable

    rig = LiveRig(tmp_path, make_policy("fifo", for_server=True), gpus=2)
    try:
        rig.submit(10_000, gpus=2)
        rig.settle()
    finally:
        rig.close()
    with pytest.raises(Unavailable, match=r"job 1 is still running on GPUs 0,1"):
        LiveRig(tmp_path, make_policy("fifo", for_server=True), gpus=1)


def test_estimates_stay_within_a_year_when_starvation_preemptions_ping_pong(
    tmp_path: Path,
) -> None:
    """Under `default`, jobs without limits preempt each other by the starvation guard, with
    waits that double each time: the projection must not answer in year 12,000."""
    rig = LiveRig(tmp_path, make_policy("default", for_server=True), gpus=2)
    try:
        rig.now = 1_700_000_000.0
        rig.submit(10**9, gpus=1, preemptible=True)
        rig.submit(10**9, gpus=1, preemptible=True)
        rig.settle()
        waiting = [rig.submit(10**9, gpus=1, preemptible=True) for _ in range(48)]
        rig.settle()
        estimates = rig.scheduler.estimated_starts()
        assert set(estimates) == {job.id for job in waiting}
        for start in estimates.values():
            assert start is None or rig.now <= start <= rig.now + 366 * 86400
    finally:
        rig.close()


def test_a_drained_gpu_stays_out_of_service_across_a_restart(tmp_path: Path) -> None:
    rig = LiveRig(tmp_path, make_policy("fifo", for_server=True), gpus=2)
    try:
        running = rig.submit(10_000, gpus=1)
        rig.settle()
        held = rig.job(running.id).gpus[0]
        requeued = rig.gpus.drain(held, "maintenance", rig.actor, now=True)
        assert [j.id for j in requeued] == [running.id]
        rig.settle()
        job = rig.job(running.id)
        assert job.restarts == 1 and held not in job.gpus  # requeued, restarted elsewhere
        rig.verbs.cancel(running.id, rig.actor)
        rig.settle()
    finally:
        rig.close()
    again = LiveRig(tmp_path, make_policy("default", for_server=True), gpus=2)
    try:
        pair = again.submit(100, gpus=2)
        single = again.submit(100, gpus=1)
        again.settle()
        assert again.state(pair.id) is JobState.PENDING  # one GPU is out of service
        assert again.job(single.id).gpus == (1 - held,)
        again.gpus.resume(held, again.actor)
        again.advance(again.now + 100)  # the single job ends; both GPUs are free again
        assert again.state(pair.id) is JobState.RUNNING
    finally:
        again.close()


def test_a_new_job_goes_to_a_cool_gpu_before_a_hot_one(tmp_path: Path) -> None:
    rig = LiveRig(tmp_path, make_policy("fifo", for_server=True), gpus=3)
    try:
        rig.scheduler.set_hot({0: "91 C (limit 85 C)"})
        first = rig.submit(100, gpus=1)
        rig.settle()
        second = rig.submit(100, gpus=2)
        rig.settle()
        assert rig.job(first.id).gpus == (1,)
        assert rig.job(second.id).gpus == (2, 0)  # the hot one only when nothing else is free
    finally:
        rig.close()


# One pass after a restart: (seconds after it, jobs started and their GPUs, jobs preempted).
_Pass = tuple[float, list[tuple[int, tuple[int, ...]]], list[int]]


def _stored_world(seed: int) -> list[Job]:
    """What a stopped server left in its store: finished runs of three users that overlapped
    (censored runs at every instant of the replay), two preemptible jobs still running on
    GPUs 0 and 1, and pending jobs of every user."""
    rng = random.Random(seed)
    jobs, t = [], 0.0
    for job_id in range(1, 81):
        t += rng.choice([5.0, 60.0, 300.0])
        run = rng.choice([30.0, 200.0, 900.0, 4_000.0, 20_000.0])
        spec = JobSpec(argv=("x",), name="x", workdir="/", gpus=rng.choice([1, 1, 2, 4]),
                       preemptible=True)  # fmt: skip
        jobs.append(Job(id=job_id, spec=spec, owner=rng.choice("abc"), submitted_at=t,
                        state=rng.choice([JobState.COMPLETED, JobState.FAILED]),
                        started_at=t + 1.0, ended_at=t + 1.0 + run))  # fmt: skip
    end = max(j.ended_at or 0.0 for j in jobs)
    for job_id, gpu in ((81, 0), (82, 1)):
        spec = JobSpec(argv=("x",), name="x", workdir="/", gpus=1, preemptible=True)
        jobs.append(Job(id=job_id, spec=spec, owner="a", submitted_at=end - 9_000.0,
                        state=JobState.RUNNING, started_at=end - 8_000.0, gpus=(gpu,)))  # fmt: skip
    for job_id in range(83, 95):
        spec = JobSpec(argv=("x",), name="x", workdir="/", gpus=rng.choice([1, 2, 4]),
                       preemptible=True)  # fmt: skip
        jobs.append(Job(id=job_id, spec=spec, owner=rng.choice("abc"), state=JobState.PENDING,
                        submitted_at=end - rng.choice([5_000.0, 100.0, 3.0])))  # fmt: skip
    return jobs


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_restart_replays_the_past_into_the_policy_as_a_full_replay_does(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A restart's replay leaves unranked the jobs that start later in it (`submit_to_start`)
    and unpredicted the ends of the runs that end later in it (`started_to_end`):
    the restarted server orders its queue and decides its first passes, preemptions included,
    exactly as when every replayed submit is ranked."""
    from gpuyard.domain.job import Gpu, NodeCapacity
    from gpuyard.scheduling.policies.default import DefaultPolicy
    from gpuyard.services.scheduler.inventory import Inventory
    from gpuyard.services.scheduler.live import LiveScheduler

    jobs = _stored_world(seed)
    now = max(j.ended_at or j.submitted_at for j in jobs) + 10.0
    gpus = tuple(Gpu(i, f"GPU-{i}", "declared", None, False) for i in range(4))

    def restarted() -> tuple[list[int], list[_Pass]]:
        inventory = Inventory(gpus, NodeCapacity("node0", cpus=64, mem_mib=10**6), "declared")
        clock = [now]
        live = LiveScheduler(make_policy("default", for_server=True), inventory,
                             lambda: clock[0], estimates_in_process=True)  # fmt: skip
        try:
            live.rebuild(jobs)
            order = [j.id for j in live.policy.pending(now)]
            passes: list[_Pass] = []
            for later in (0.0, 300.0, 4_000.0):
                clock[0] = now + later
                decided = live.decide()
                passes.append((later, [(x.job_id, x.gpus) for x in decided.launches],
                               decided.preempt))  # fmt: skip
            return order, passes
        finally:
            live.close()

    unranked = restarted()
    monkeypatch.delattr(DefaultPolicy, "submit_to_start")
    monkeypatch.delattr(DefaultPolicy, "started_to_end")
    assert restarted() == unranked
    assert unranked[0] and any(p[1] or p[2] for p in unranked[1])  # the passes decided something
