"""Webhooks end to end: a real server process, the CLI, and a real HTTP receiver on loopback
(which the admin allowed: GPUYARD_NOTIFY_ALLOW=loopback). A user sets their webhook once,
their jobs' begin and end arrive in order, signed with the secret `notify set` printed; a
receiver that fails is tried again; a delivery left pending by a killed server is sent by
the restarted one."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.server import ServerProcess, wait_ended, wait_for
from tests.webhook_receiver import Receiver, receiver

pytestmark = pytest.mark.e2e


@pytest.fixture
def hook() -> Iterator[Receiver]:
    with receiver() as r:
        yield r


def start_server(tmp_path: Path, retry_s: float) -> ServerProcess:
    env = {**os.environ, "GPUYARD_NOTIFY_ALLOW": "loopback",
           "GPUYARD_NOTIFY_RETRY_S": str(retry_s)}  # fmt: skip
    return ServerProcess(tmp_path / "state", "--gpus", "2", "--cpus", "8", env=env).start()


def test_a_users_webhook_gets_begin_and_end_in_order_signed_and_logged(
    tmp_path: Path, hook: Receiver
) -> None:
    server = start_server(tmp_path, retry_s=0.2)
    try:
        hook.answers = [500]  # the first try fails: tried again
        made = server.cli("notify", "set", hook.url, "--events", "begin,fail")
        secret = made.stdout.split("secret: ", 1)[1].split()[0]
        assert "shown once" in made.stderr
        shown = server.cli("notify", "show").stdout
        assert hook.url in shown and "begin,fail" in shown
        failed = server.cli("submit", "--", "sh", "-c", "exit 3").stdout.strip()
        assert wait_ended(server.client(), failed)["state"] == "FAILED"
        got = hook.wait(3)
        # begin's first try got a 500: it came again, and fail waited behind it.
        assert [(r.event, r.status) for r in got] == [("begin", 500), ("begin", 200),
                                                       ("fail", 200)]  # fmt: skip
        assert all(r.verifies(secret) for r in got)
        assert got[0].headers["x-gpuyard-delivery"] == got[1].headers["x-gpuyard-delivery"]
        summary = got[2].json["job"]
        assert (summary["id"], summary["state"], summary["exit_code"]) == (int(failed), "FAILED", 3)
        # A job naming its own URL and events: they go there (not to the default), signed
        # with the same secret (the owner's).
        ok = server.client().submit(["true"], notify=[hook.url + "/own"],
                                    notify_events=["begin", "end"])  # fmt: skip
        wait_ended(server.client(), ok["id"])
        hook.wait(5)
        own = [r for r in hook.received() if r.path == "/hook/own"]
        assert [r.event for r in own] == ["begin", "end"]
        assert own[1].json["job"]["state"] == "COMPLETED" and own[1].verifies(secret)
        log = json.loads(server.cli("notify", "log", "--json").stdout)
        assert [(d["event"], d["job_id"], d["state"], d["attempts"]) for d in log] == [
            ("end", ok["id"], "delivered", 1), ("begin", ok["id"], "delivered", 1),
            ("fail", int(failed), "delivered", 1), ("begin", int(failed), "delivered", 2),
        ]  # fmt: skip
        assert {d["host"] for d in log} == {f"127.0.0.1:{hook.port}"}  # never the path
        table = server.cli("notify", "log").stdout
        assert "delivered" in table and "/hook" not in table
        ping = server.cli("notify", "test")
        assert "delivered (HTTP 200)" in ping.stdout
        assert hook.received()[-1].event == "ping" and hook.received()[-1].verifies(secret)
        # A new secret: shown once, and what signs from now on.
        rotated = server.cli("notify", "secret", "--rotate").stdout.split("secret: ")[1].split()[0]
        assert rotated != secret
        assert "--rotate" in server.cli("notify", "secret").stderr  # not shown again
        server.cli("notify", "test")
        assert hook.received()[-1].verifies(rotated) and not hook.received()[-1].verifies(secret)
    finally:
        server.stop()
        server.kill_jobs()


def test_a_delivery_left_pending_by_a_killed_server_is_sent_after_the_restart(
    tmp_path: Path, hook: Receiver
) -> None:
    server = start_server(tmp_path, retry_s=600)  # this server would try again in 10 minutes
    try:
        hook.answers = [503]
        server.cli("notify", "set", hook.url)  # default events: end, fail
        job_id = int(server.cli("submit", "--", "true").stdout.strip())
        wait_ended(server.client(), job_id)
        (first,) = hook.wait(1)
        wait_for(lambda: server.client().notify_deliveries()[0]["attempts"] == 1)
        (pending,) = server.client().notify_deliveries()
        assert (pending["state"], pending["event"], pending["last_status"]) == (
            "pending", "end", 503
        )  # fmt: skip
        server.kill9()
        server.start()  # it finds the delivery pending and sends it
        (_, again) = hook.wait(2)
        assert again.headers["x-gpuyard-delivery"] == first.headers["x-gpuyard-delivery"]
        assert (again.status, again.json["job"]["id"]) == (200, job_id)
        wait_for(lambda: server.client().notify_deliveries()[0]["state"] == "delivered")
        assert server.client().notify_deliveries()[0]["attempts"] == 2
    finally:
        server.stop()
        server.kill_jobs()
