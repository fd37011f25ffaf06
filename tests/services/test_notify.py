"""Webhooks on the server's own wiring (`bootstrap.build_core`, SQLite, simulated processes)
against a real HTTP receiver: which events a job's changes are, where they go (the job's own
URLs, its owner's defaults, their team's), signed with the owner's secret, tried again after a
failure in order, kept across a restart; and the hosts the server refuses to POST to."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuyard.adapters.webhook import HttpPoster
from gpuyard.domain.errors import Forbidden, InvalidRequest
from gpuyard.domain.job import Job
from gpuyard.domain.principal import Principal
from gpuyard.domain.states import JobState
from gpuyard.domain.webhooks import UrlPolicy, events_of
from gpuyard.scheduling.policies import make_policy
from gpuyard.services.workflows.notify import NotifyService, make_notify
from gpuyard.settings import Settings
from tests.e2e.server import wait_for
from tests.services.live_harness import LiveRig
from tests.webhook_receiver import Receiver, receiver

ADA = Principal("ada")


@pytest.fixture
def hook() -> Iterator[Receiver]:
    with receiver() as r:
        yield r


def make_rig(tmp_path: Path, allow: str = "loopback") -> tuple[LiveRig, NotifyService]:
    rig = LiveRig(tmp_path, make_policy("fifo", for_server=True), gpus=1,
                  settings=Settings(notify_allow=allow, notify_retry_s=30.0))  # fmt: skip
    assert rig.notify is not None
    return rig, rig.notify


def run_to_end(rig: LiveRig, notify: NotifyService, job: Job, work_s: float = 10.0) -> None:
    rig.settle()
    assert rig.state(job.id) is JobState.RUNNING
    notify.sender.step()
    rig.advance(rig.now + work_s)
    assert rig.state(job.id).is_terminal
    notify.sender.step()


def test_a_job_asking_for_begin_and_end_gets_both_in_order_signed_and_without_its_secrets(
    tmp_path: Path, hook: Receiver
) -> None:
    rig, notify = make_rig(tmp_path)
    secret = notify.rotate_secret(ADA).secret
    assert secret is not None
    job = rig.submit(
        10.0, name="train", notify=(hook.url,), notify_events=("begin", "end"),
        env=(("WANDB_API_KEY", "sekret-123"),), argv=("python", "--token=abc"),
    )  # fmt: skip
    run_to_end(rig, notify, job)
    begin, end = hook.wait(2)
    assert [begin.event, end.event] == ["begin", "end"]
    assert begin.verifies(secret) and end.verifies(secret)
    assert not end.verifies("another secret")
    assert end.json["event"] == "end" and end.json["delivery_id"] == end.headers[
        "x-gpuyard-delivery"]  # fmt: skip
    summary = end.json["job"]
    assert (summary["id"], summary["name"], summary["owner"], summary["state"]) == (
        job.id, "train", "ada", "COMPLETED"
    )  # fmt: skip
    assert summary["exit_code"] == 0 and summary["ended_at"] is not None
    for request in (begin, end):
        assert b"sekret-123" not in request.body and b"--token" not in request.body
        assert secret.encode() not in request.body
        assert not {"env", "argv", "command", "secret"} & set(request.json["job"])
    log = notify.deliveries(ADA)
    assert [(d.event, d.state, d.attempts, d.host) for d in log] == [
        ("end", "delivered", 1, f"127.0.0.1:{hook.port}"),
        ("begin", "delivered", 1, f"127.0.0.1:{hook.port}"),
    ]


def test_a_failed_try_is_tried_again_later_and_holds_back_the_next_event(
    tmp_path: Path, hook: Receiver
) -> None:
    rig, notify = make_rig(tmp_path)
    hook.answers = [500]
    job = rig.submit(10.0, notify=(hook.url,), notify_events=("begin", "end"))
    run_to_end(rig, notify, job)
    # begin got a 500: end, due already, waits behind it (a receiver never sees end first).
    assert [(r.event, r.status) for r in hook.received()] == [("begin", 500)]
    (_, begin) = notify.deliveries(ADA)
    assert (begin.state, begin.attempts, begin.last_status, begin.last_error) == (
        "pending", 1, 500, "HTTP 500"
    )  # fmt: skip
    assert begin.next_at == pytest.approx(begin.updated_at + 30.0)  # the first retry's wait
    rig.now = begin.next_at
    notify.sender.step()  # begin again
    notify.sender.step()  # then end
    assert [(r.event, r.status) for r in hook.wait(3)] == [
        ("begin", 500), ("begin", 200), ("end", 200)
    ]  # fmt: skip
    assert [r.headers["x-gpuyard-delivery"] for r in hook.received()][:2] == [begin.id] * 2
    assert [(d.event, d.state, d.attempts) for d in notify.deliveries(ADA)] == [
        ("end", "delivered", 1), ("begin", "delivered", 2)
    ]  # fmt: skip


def test_five_failed_tries_end_the_delivery_failed(tmp_path: Path, hook: Receiver) -> None:
    rig, notify = make_rig(tmp_path)
    hook.answers = [503] * 10
    job = rig.submit(10.0, notify=(hook.url,))
    run_to_end(rig, notify, job)  # default events: end
    for _ in range(5):
        rig.now += 1000.0
        notify.sender.step()
    (end,) = notify.deliveries(ADA)
    assert (end.event, end.state, end.attempts, end.last_status) == ("end", "failed", 5, 503)
    assert len(hook.received()) == 5


def test_a_restarted_server_sends_what_was_left_pending(tmp_path: Path, hook: Receiver) -> None:
    rig, notify = make_rig(tmp_path)
    hook.answers = [502]
    job = rig.submit(10.0, notify=(hook.url,), notify_events=("end",))
    run_to_end(rig, notify, job)
    assert [d.state for d in notify.deliveries(ADA)] == ["pending"]
    # A new server on the same database: its sender finds the pending delivery and sends it.
    policy = UrlPolicy.parse("loopback")
    again = make_notify(rig.store, HttpPoster(policy), policy, retry_first_s=0.01)
    again.sender.start()
    try:
        assert [(r.event, r.status) for r in hook.wait(2)] == [("end", 502), ("end", 200)]
        wait_for(lambda: again.deliveries(ADA)[0].state == "delivered")
    finally:
        again.sender.stop()
    assert again.deliveries(ADA)[0].attempts == 2


def test_defaults_apply_to_jobs_naming_no_url_and_the_most_specific_wins(
    tmp_path: Path, hook: Receiver
) -> None:
    rig, notify = make_rig(tmp_path)
    admin = Principal("root", role="admin")
    notify.cache.team_of = lambda user: "vision" if user in ("ada", "bob") else None
    team_entry, team_secret = notify.set(admin, [hook.url + "/team"], ["begin"], team="vision")
    assert team_secret is not None and team_entry.secret == team_secret
    entry, made = notify.set(ADA, [hook.url + "/ada"], ["end"])
    assert made is not None and entry.secret == made
    jobs = []
    for user, spec in [
        ("ada", {"notify": (hook.url + "/job",)}),  # its own URL wins: default events
        ("ada", {}),  # ada's defaults: end
        ("ada", {"notify_events": ("begin",)}),  # --mail-type BEGIN: to ada's URL
        ("bob", {}),  # bob set none: his team's, begin
    ]:
        jobs.append(job := rig.submit(10.0, user=user, **spec))
        run_to_end(rig, notify, job)
    own, mine, mailed, bobs = jobs
    got = hook.wait(4)
    assert sorted((r.path, r.event, r.json["job"]["id"]) for r in got) == sorted([
        ("/hook/job", "end", own.id), ("/hook/ada", "end", mine.id),
        ("/hook/ada", "begin", mailed.id), ("/hook/team", "begin", bobs.id),
    ])  # fmt: skip
    by_path = {r.path: r for r in got}
    assert by_path["/hook/team"].verifies(team_secret)  # a team's hook: the team's secret
    assert by_path["/hook/ada"].verifies(made)
    # Cleared: ada's jobs get the team's again; her secret stays.
    notify.clear(ADA)
    assert notify.settings(ADA)[1].secret == made


def test_a_cancelled_pending_job_and_a_timeout_are_their_own_events(
    tmp_path: Path, hook: Receiver
) -> None:
    rig, notify = make_rig(tmp_path)
    blocker = rig.submit(100.0, gpus=1)
    waiting = rig.submit(10.0, gpus=1, notify=(hook.url,), notify_events=("cancel",))
    rig.settle()
    assert rig.state(waiting.id) is JobState.PENDING
    rig.verbs.cancel(waiting.id, ADA)
    notify.sender.step()
    (cancel,) = hook.wait(1)
    assert (cancel.event, cancel.json["job"]["state"]) == ("cancel", "CANCELLED")
    rig.verbs.cancel(blocker.id, ADA)
    # events_of: what each change is, most specific first.
    running = waiting.transition(JobState.RUNNING, gpus=(0,))
    timed_out = running.transition(JobState.TIMEOUT)
    assert events_of(None, waiting) == ()
    assert events_of(waiting, running) == ("begin",)
    assert events_of(running, timed_out) == ("time_limit", "fail")
    assert events_of(running, running.transition(JobState.PENDING)) == ("requeue",)
    assert events_of(running, running.transition(JobState.OUT_OF_MEMORY)) == ("fail",)


def test_loopback_and_link_local_are_refused_unless_the_admin_allows_them(
    tmp_path: Path, hook: Receiver
) -> None:
    rig, notify = make_rig(tmp_path, allow="")
    with pytest.raises(InvalidRequest, match="GPUYARD_NOTIFY_ALLOW"):
        notify.set(ADA, [hook.url])
    job = rig.submit(10.0, notify=(hook.url,))
    run_to_end(rig, notify, job)
    (end,) = notify.deliveries(ADA)
    assert (end.state, end.attempts) == ("failed", 1)  # no retry can help
    assert "GPUYARD_NOTIFY_ALLOW" in end.last_error
    assert hook.received() == []
    default = UrlPolicy.parse("", own_ports=(8765,))
    assert default.refuses_name("http://169.254.169.254/latest/meta-data") is not None
    assert default.refuses_name("http://[::1]:9000/x") is not None
    assert default.refuses_name("http://localhost:9000/x") is not None
    assert default.refuses_name("https://10.1.2.3/x") is None  # a lab's relay
    assert default.refuses_name("https://hooks.example.org/x") is None  # resolved when sent
    loopback = UrlPolicy.parse("loopback,hooks.example.org", own_ports=(8765,))
    assert loopback.refuses_name("http://127.0.0.1:9000/x") is None
    assert "own API" in str(loopback.refuses_name("http://127.0.0.1:8765/api/v1/jobs"))
    assert loopback.refuses_name("https://10.1.2.3/x") is not None
    assert loopback.refuses_address("hooks.example.org", "10.0.0.1", 443) is None
    assert UrlPolicy.parse("none").refuses_name("https://hooks.example.org/") is not None
    with pytest.raises(InvalidRequest, match="GPUYARD_NOTIFY_ALLOW"):
        UrlPolicy.parse("loopback,a b")


def test_who_may_set_what(tmp_path: Path, hook: Receiver) -> None:
    _, notify = make_rig(tmp_path)
    with pytest.raises(Forbidden, match="only an admin"):
        notify.set(ADA, [hook.url], team="vision")
    with pytest.raises(InvalidRequest, match="notify_events"):
        notify.set(ADA, [hook.url], ["sometimes"])
    notify.set(ADA, [hook.url])
    assert [(e.kind, e.name) for e in notify.settings(Principal("bob"))] == []
    (ping,) = notify.test(ADA)
    notify.sender.step()
    (got,) = hook.wait(1)
    assert (got.event, got.json["job"], ping.event) == ("ping", None, "ping")
    assert json.loads(got.body)["delivery_id"] == ping.id


def test_a_job_with_a_time_limit_is_warned_at_90_percent_of_it_once(
    tmp_path: Path, hook: Receiver
) -> None:
    rig, notify = make_rig(tmp_path)
    warned = rig.submit(1000.0, gpus=1, time_limit_s=100, notify=(hook.url,),
                        notify_events=("time_limit",))  # fmt: skip
    rig.settle()
    notify.sender.step()
    rig.now = 89.0
    notify.sender.step()
    assert hook.received() == []
    rig.now = 90.0
    notify.sender.step()
    notify.sender.step()
    (warning,) = hook.wait(1)
    assert (warning.event, warning.json["job"]["state"]) == ("time_limit", "RUNNING")
    assert warning.json["job"]["time_limit_s"] == 100
    # A restarted server plans the warnings of the jobs still running again, and knows from
    # the log that this one was sent.
    policy = UrlPolicy.parse("loopback")
    again = make_notify(rig.store, HttpPoster(policy), policy, clock=rig.clock)
    again.sender.resume_warnings([rig.job(warned.id)])
    again.sender.step()
    assert len(hook.received()) == 1
    late = rig.submit(1000.0, gpus=1, time_limit_s=100, notify=(hook.url,),
                      notify_events=("time_limit",))  # fmt: skip
    rig.verbs.cancel(warned.id, ADA)
    rig.settle()
    assert rig.state(late.id) is JobState.RUNNING
    rig.now += 95.0  # the server was down when its warning was due: sent at the restart
    again = make_notify(rig.store, HttpPoster(policy), policy, clock=rig.clock)
    again.sender.resume_warnings([rig.job(late.id)])
    again.sender.step()
    assert [r.json["job"]["id"] for r in hook.wait(2)] == [warned.id, late.id]
    rig.verbs.cancel(late.id, ADA)
    rig.settle()
    # One that ends before 90% of its limit is not warned.
    quick = rig.submit(10.0, gpus=1, time_limit_s=100, notify=(hook.url,),
                       notify_events=("time_limit",))  # fmt: skip
    run_to_end(rig, notify, quick)
    rig.now += 1000.0
    notify.sender.step()
    assert len(hook.received()) == 2
