"""The web dashboard's server side against a real server process over real HTTP: a browser's
login (token, or the CLI's one-time link, over TCP and on the root server's Unix socket),
its session (cookie and page key) on the API and the live streams a page follows (the GPUs,
the events, the queue's changes), each seen to deliver a change made by someone else; the
server's root account is refused at the dashboard unless the admin allows it."""

from __future__ import annotations

import json
import os
import queue
import re
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from tests.e2e.server import GPUYARD, ServerProcess

pytestmark = pytest.mark.e2e

ARRIVAL_S = 20.0  # how long a test waits for an event before it fails (not a latency bound)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    # Its admin is the state dir's token, root's on a root server: let it in (tested below).
    env = {**os.environ, "GPUYARD_ALLOW_ROOT_DASHBOARD": "1"}
    srv = ServerProcess(
        tmp_path / "state", "--gpus", "2", "--cpus", "4", "--kill-grace", "1", env=env
    )
    srv.start()
    yield srv
    srv.stop()
    srv.kill_jobs()


def _admin_token(srv: ServerProcess) -> str:
    return (srv.state_dir / "token").read_text().strip()


def _browser(srv: ServerProcess, token: str) -> httpx.Client:
    return login(srv.url, token)


def login(url: str, token: str) -> httpx.Client:
    """A browser logged in with `token`: its cookie jar holds the session's cookie, and it
    sends the page's key (the login's redirect's fragment) as the dashboard's script does."""
    browser = httpx.Client(base_url=url, follow_redirects=False, timeout=30)
    answer = browser.post("/ui/login", data={"token": token})
    assert answer.status_code == 303, answer.text
    keep_key(browser, answer)
    return browser


def keep_key(browser: httpx.Client, answer: httpx.Response) -> None:
    fragment = urlsplit(answer.headers["location"]).fragment
    assert fragment.startswith("key="), answer.headers["location"]
    browser.headers["X-Session-Key"] = fragment.removeprefix("key=")


class Stream:
    """An SSE stream read on a thread: its events (`event`, parsed `data`) in a queue."""

    def __init__(self, browser: httpx.Client, path: str) -> None:
        self.events: queue.Queue[tuple[str, Any]] = queue.Queue()
        self._client = httpx.Client(
            base_url=str(browser.base_url),
            cookies=browser.cookies,
            timeout=None,
            headers={"X-Session-Key": browser.headers["X-Session-Key"]},
        )
        self._opened = threading.Event()
        self.status = 0
        self._thread = threading.Thread(target=self._read, args=(path,), daemon=True)
        self._thread.start()
        assert self._opened.wait(ARRIVAL_S), "the stream did not open"
        assert self.status == 200

    def _read(self, path: str) -> None:
        try:
            with self._client.stream("GET", path) as answer:
                self.status = answer.status_code
                self._opened.set()
                kind = ""
                for line in answer.iter_lines():
                    if line.startswith("event: "):
                        kind = line[7:]
                    elif line.startswith("data: "):
                        self.events.put((kind, json.loads(line[6:])))
        except httpx.HTTPError:
            pass  # closed by the test
        finally:
            self._opened.set()

    def next_matching(self, want: Any) -> tuple[str, Any]:
        """The first event (from now on the queue) for which `want(kind, data)` holds."""
        while True:
            try:
                kind, data = self.events.get(timeout=ARRIVAL_S)
            except queue.Empty:
                raise AssertionError("the stream delivered no matching event") from None
            if want(kind, data):
                return kind, data

    def close(self) -> None:
        self._client.close()


def test_a_drain_reaches_the_gpu_stream_and_the_events_stream(server: ServerProcess) -> None:
    browser = _browser(server, _admin_token(server))
    gpus = Stream(browser, "/api/v1/gpus/stream")
    events = Stream(browser, "/api/v1/events/stream")
    try:
        _, first = gpus.next_matching(lambda kind, data: kind == "gpus")
        assert [g["index"] for g in first] == [0, 1]
        assert not any(g["drained"] for g in first)
        drained = browser.post("/api/v1/gpus/1/drain", json={"reason": "fan noise"})
        assert drained.status_code == 200, drained.text
        _, later = gpus.next_matching(lambda kind, data: data[1]["drained"])
        assert later[1]["drain_reason"] == "fan noise"
        _, event = events.next_matching(lambda kind, data: kind == "event")
        assert event["kind"] == "drain" and event["gpu"] == 1 and "fan noise" in event["message"]
        resumed = browser.post("/api/v1/gpus/1/resume")
        assert resumed.status_code == 200, resumed.text
        _, event = events.next_matching(lambda kind, data: data.get("kind") == "resume")
        assert event["gpu"] == 1
        listed = browser.get("/api/v1/events", params={"kind": "drain"}).json()
        assert [e["gpu"] for e in listed] == [1]
    finally:
        gpus.close()
        events.close()


def test_the_cli_prints_a_one_time_link_that_logs_in_as_the_cli(server: ServerProcess) -> None:
    out = server.cli("dashboard", "--json")
    link = json.loads(out.stdout)
    assert link["url"].startswith(server.url + "/ui/login?code=")
    browser = httpx.Client(follow_redirects=False, timeout=30)
    page = browser.get(link["url"])
    assert page.status_code == 200 and "Continue as" in page.text
    code = re.search(r'name="code" value="([^"]+)"', page.text)
    assert code is not None
    answer = browser.post(f"{server.url}/ui/login", data={"code": code.group(1)})
    assert answer.status_code == 303
    keep_key(browser, answer)
    assert browser.get(f"{server.url}/api/v1/whoami").json()["role"] == "admin"
    again = httpx.post(f"{server.url}/ui/login", data={"code": code.group(1)})
    assert again.status_code in (303, 401) and not again.cookies
    text = server.cli("dashboard").stdout
    assert "/ui/login?code=" in text and "once" in text


@pytest.mark.skipif(os.geteuid() != 0, reason="the Unix socket is a root server's")
def test_on_the_servers_machine_the_link_is_the_socket_users(tmp_path: Path) -> None:
    from tests.e2e.test_local_socket import as_user, call
    from tests.e2e.unix_users import unix_users

    place = Path(tempfile.mkdtemp(prefix="gydash-"))
    place.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUYARD_")}
    srv = ServerProcess(
        place / "state", "--gpus", "1", "--cpus", "2",
        "--socket", str(place / "run" / "gpuyard.sock"), env=env,
    ).start()  # fmt: skip
    try:
        with unix_users() as users:
            sock = place / "run" / "gpuyard.sock"
            status, link = as_user(users.alice, call(sock, "POST", "/api/v1/web/login-link"))
            assert status == 200, link
            assert link["user"] == users.alice
            assert link["url"].startswith(srv.url)  # its TCP address, for the browser
            code = link["path"].split("code=")[1]
            browser = httpx.Client(base_url=srv.url, follow_redirects=False, timeout=30)
            answer = browser.post("/ui/login", data={"code": code})
            assert answer.status_code == 303
            keep_key(browser, answer)
            me = browser.get("/api/v1/whoami").json()
            assert (me["user"], me["role"]) == (users.alice, "user")
            # Root's own `gpuyard dashboard` is refused in one line (an admin account is for
            # the browser); the link is never made.
            status, refused = as_user(None, call(sock, "POST", "/api/v1/web/login-link"))
            assert status == 403 and "admin account" in refused["error"]["message"]
            out = subprocess.run(
                [GPUYARD, "dashboard"], capture_output=True,
                text=True, env={**env, "GPUYARD_SOCKET": str(sock)}, timeout=60,
            )  # fmt: skip
            assert out.returncode != 0 and "admin account" in out.stderr
            assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr
    finally:
        srv.stop()
        shutil.rmtree(place, ignore_errors=True)
