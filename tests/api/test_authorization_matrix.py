"""The authorisation matrix (issue 11), generated from the server's own OpenAPI document:
every route x method x caller, against the expected status class. A route that OpenAPI lists
and `RULES` does not is a failure, so a new route must say who may call it.

Callers: no token, a malformed token, an expired one, the metrics token, another user's token
(a second real account made through the admin API), the owner's read-scope token, the owner's
own token, the admin's; and, on a root server, the owner as a Unix socket peer (the kernel's
uid, no token, as uvicorn's protocol puts it in the scope). Job routes act on a job of the
owner's: another user gets 404 (it does not exist for them), the owner and an admin reach the
use case (2xx, or 409 when the job's state does not allow the verb).

In-process (the ASGI app over a real SQLite store and real supervisors; once on one box, once
on a local Ray cluster of two machines), the Host the server's own address; each request comes
from its own client address, and the failed-authentication throttle (per credential, tested on
its own: tests/api/test_identity_caps.py) is given a burst no run reaches, so it never answers
429 in place of the status under test."""

from __future__ import annotations

import contextlib
import itertools
import os
import pwd
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from starlette.types import ASGIApp, Receive, Scope, Send

from gpuyard.api.front_door import PEER
from gpuyard.bootstrap import METRICS_TOKEN_FILE, build_app
from gpuyard.domain.principal import Principal
from gpuyard.services.access.rules import WHO
from gpuyard.services.server import ServerFacade
from gpuyard.settings import Settings
from tests.api.served import cancel_unfinished

OWNER, OTHER, VICTIM = "nobody", "daemon", "gyvictim"  # Unix users every Linux has (root runs
# a job as its owner's Unix user); the victim is only disabled and enabled again.
SOCKET = os.geteuid() == 0  # only a root server takes callers on its Unix socket

NONE, BAD, EXPIRED, METRICS, OTHER_USER, READ, USER, ADMIN, SOCKET_PEER = (
    "no token", "bad token", "expired token", "metrics token", "another user", "read scope",
    "owner", "admin", "socket peer",
)  # fmt: skip
# The callers, in the order they call each route.
CALLERS = (
    [NONE, BAD, EXPIRED, METRICS, OTHER_USER, READ]
    + ([SOCKET_PEER] if SOCKET else [])
    + [USER, ADMIN]
)
OK, GONE, DONE_OR_CONFLICT = "2xx", "404", "2xx|409"
CLASSES: dict[str, Callable[[int], bool]] = {
    OK: lambda s: 200 <= s < 300,
    GONE: lambda s: s == 404,
    DONE_OR_CONFLICT: lambda s: 200 <= s < 300 or s == 409,
    "401": lambda s: s == 401,
    "403": lambda s: s == 403,
}


@dataclass(frozen=True)
class Rule:
    """Who may call a route: `public` (anyone), `reader` (any account, any scope, whatever
    the method), `metrics`
    (the metrics token and admins), `submitter` (an account's submit or admin scope), `admin`
    (an admin's admin scope), `owner` (the resource's owner and admins; anyone else: 404)."""

    who: str
    body: Callable[[Rig], Any] | None = None


RULES: dict[tuple[str, str], Rule] = {
    ("GET", "/healthz"): Rule("public"),
    ("GET", "/metrics"): Rule("metrics"),
    ("GET", "/api/v1/info"): Rule("reader"),
    ("GET", "/api/v1/whoami"): Rule("reader"),
    ("GET", "/api/v1/gpus"): Rule("reader"),
    ("GET", "/api/v1/nodes"): Rule("reader"),
    ("GET", "/api/v1/nodes/{name}/doctor"): Rule("admin"),  # the facts name the machine's paths
    ("GET", "/api/v1/jobs"): Rule("reader"),
    ("GET", "/api/v1/jobs/changes"): Rule("reader"),
    ("POST", "/api/v1/jobs"): Rule("submitter", lambda rig: rig.job_body()),
    ("POST", "/api/v1/jobs/dry-run"): Rule("submitter", lambda rig: rig.job_body()),
    ("POST", "/api/v1/jobs/clean"): Rule("submitter"),
    # Many at once: each job as its cancel route allows (another's refused as not found).
    ("POST", "/api/v1/jobs/cancel"): Rule("submitter", lambda rig: {"ids": [999_999]}),
    ("GET", "/api/v1/jobs/{job_id}"): Rule("owner"),
    ("PATCH", "/api/v1/jobs/{job_id}"): Rule("owner", lambda rig: {"priority": 5}),
    ("POST", "/api/v1/jobs/{job_id}/cancel"): Rule("owner"),
    ("GET", "/api/v1/jobs/{job_id}/log"): Rule("owner"),
    ("GET", "/api/v1/jobs/{job_id}/gpu-history"): Rule("owner"),
    ("GET", "/api/v1/jobs/{job_id}/progress"): Rule("owner"),
    ("GET", "/api/v1/jobs/{job_id}/series"): Rule("owner"),
    ("GET", "/api/v1/gpus/{index}/history"): Rule("reader"),
    ("POST", "/api/v1/jobs/{job_id}/hold"): Rule("owner"),
    ("POST", "/api/v1/jobs/{job_id}/release"): Rule("owner"),
    ("POST", "/api/v1/jobs/{job_id}/requeue"): Rule("owner"),
    ("POST", "/api/v1/jobs/{job_id}/restart"): Rule("owner"),
    ("GET", "/api/v1/arrays/{array_id}"): Rule("owner"),
    ("POST", "/api/v1/arrays/{array_id}/cancel"): Rule("owner"),
    ("POST", "/api/v1/gpus/{index}/drain"): Rule("admin", lambda rig: {"reason": "matrix"}),
    ("POST", "/api/v1/gpus/{index}/resume"): Rule("admin"),
    ("GET", "/api/v1/admin/users"): Rule("admin"),
    ("POST", "/api/v1/admin/users"): Rule("admin", lambda rig: {"name": "gycarol"}),
    ("POST", "/api/v1/admin/users/{name}/disable"): Rule("admin"),
    ("POST", "/api/v1/admin/users/{name}/enable"): Rule("admin"),
    ("GET", "/api/v1/admin/teams"): Rule("admin"),
    ("POST", "/api/v1/admin/teams"): Rule("admin", lambda rig: {"name": "vision"}),
    ("POST", "/api/v1/tokens"): Rule("submitter", lambda rig: {"scope": "read"}),
    ("GET", "/api/v1/tokens"): Rule("reader"),
    ("DELETE", "/api/v1/tokens/{token_id}"): Rule("owner"),
    ("GET", "/api/v1/admin/limits"): Rule("reader"),  # a user: their own and their team's
    ("PUT", "/api/v1/admin/limits/{kind}/{name}"): Rule("admin", lambda rig: {"max_gpus": 8}),
    ("DELETE", "/api/v1/admin/limits/{kind}/{name}"): Rule("admin"),
    # Webhooks: one's own settings (a team's: `?team=`, admins), secret, log, a test ping.
    ("GET", "/api/v1/notify"): Rule("reader"),
    ("PUT", "/api/v1/notify"): Rule(
        "submitter", lambda rig: {"urls": ["https://192.0.2.1/hook"], "events": ["end"]}
    ),
    ("DELETE", "/api/v1/notify"): Rule("submitter"),
    ("POST", "/api/v1/notify/secret"): Rule("submitter"),
    ("GET", "/api/v1/notify/deliveries"): Rule("reader"),
    ("POST", "/api/v1/notify/test"): Rule("submitter", lambda rig: {"url": "https://192.0.2.1/"}),
    ("GET", "/api/v1/share"): Rule("reader"),
    ("GET", "/api/v1/usage"): Rule("reader"),
    # A one-time dashboard login as the caller, with the caller's scope (a read token's: a
    # read-only session): a POST that a read token may make. Not root's (`ROOT_REFUSED`).
    ("POST", "/api/v1/web/login-link"): Rule("reader"),
    ("GET", "/api/v1/gpus/stream"): Rule("reader"),
    ("GET", "/api/v1/events"): Rule("reader"),
    ("GET", "/api/v1/events/stream"): Rule("reader"),
    ("POST", "/api/v1/sweeps"): Rule("submitter", lambda rig: rig.sweep_body()),
    ("GET", "/api/v1/sweeps"): Rule("reader"),
    ("GET", "/api/v1/sweeps/{sweep_id}"): Rule("owner"),
}


# Routes a root server's own account (the ADMIN caller, when the tests run as root) is refused:
# the dashboard's, where an admin uses an admin account (a browser session is easily lost).
ROOT_REFUSED = frozenset({("POST", "/api/v1/web/login-link")})


def expected(rule: Rule, method: str, caller: str) -> str:
    """The status class `caller` gets from a route under `rule`."""
    if rule.who == "public":
        return OK
    if caller == METRICS:
        return OK if rule.who == "metrics" else "401"
    if caller in (NONE, BAD, EXPIRED):
        return "401"
    if rule.who == "metrics":  # the scraper's: its series name every user's jobs
        return OK if caller == ADMIN else "403"
    changes = method not in ("GET", "HEAD")
    if caller == READ and changes and rule.who != "reader":
        return "403"  # the front door's: a read token only reads
    if rule.who == "admin":
        return OK if caller == ADMIN else "403"
    if rule.who == "owner":
        if caller == OTHER_USER:
            return GONE
        return DONE_OR_CONFLICT if changes else OK
    return OK  # reader, metrics, submitter


class ClientPerRequest:
    """The app with each request from a new client address (the failure throttle counts per
    address) and, with `uid` set, as a Unix socket caller with the kernel's credentials."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.uid: int | None = None
        self._addresses = itertools.count(1)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            n = next(self._addresses)
            scope = {**scope, "client": (f"10.9.{n // 250}.{n % 250 + 1}", 40000)}
            if self.uid is not None:
                scope["extensions"] = {PEER: {"pid": 1, "uid": self.uid, "gid": 0}}
        await self.app(scope, receive, send)


class Rig:
    """The in-process server with an admin, the owner and another user, each caller's
    credentials, and a fresh resource of the owner's for each route that needs one."""

    def __init__(self, server: ServerFacade, app: ClientPerRequest, client: TestClient,
                 settings: Settings, machines: int = 1) -> None:  # fmt: skip
        self.server, self.app, self.client = server, app, client
        admin = f"Bearer {settings.token_path.read_text().strip()}"
        metrics = (settings.state_dir / METRICS_TOKEN_FILE).read_text().strip()
        self.headers: dict[str, dict[str, str]] = {
            NONE: {}, ADMIN: {"Authorization": admin}, SOCKET_PEER: {},
            BAD: {"Authorization": "Bearer gpy_" + "x" * 43},
            METRICS: {"Authorization": f"Bearer {metrics}"},
        }  # fmt: skip
        for name in (OWNER, OTHER, VICTIM):
            made = self.call(ADMIN, "POST", "/api/v1/admin/users", {"name": name})
            assert made.status_code == 201, made.text
        self.headers[USER] = self._bearer(self._first_token(OWNER))
        self.headers[OTHER_USER] = self._bearer(self._first_token(OTHER))
        short = self.call(USER, "POST", "/api/v1/tokens", {"scope": "submit", "expires": "1s"})
        assert short.status_code == 201, short.text
        self.headers[EXPIRED] = self._bearer(short.json()["token"])
        read = self.call(USER, "POST", "/api/v1/tokens", {"scope": "read"})
        self.headers[READ] = self._bearer(read.json()["token"])
        # A job of the admin's holding every GPU and CPU: the owner's jobs stay PENDING, so
        # every verb meets them in a known state and none of them runs.
        blocker = {"command": ["sleep", "300"], "gpus": 2 * machines, "cpus": 4 * machines,
                   "nodes": machines, "workdir": "/"}  # fmt: skip
        started = self.call(ADMIN, "POST", "/api/v1/jobs", blocker)
        assert started.status_code == 201, started.text
        deadline = time.monotonic() + 20
        while self.state(started.json()["id"]) != "RUNNING":
            assert time.monotonic() < deadline, "the blocking job did not start"
            time.sleep(0.02)
        expires_at = short.json()["expires_at"]
        time.sleep(max(0.0, expires_at - time.time() + 0.05))

    def state(self, job_id: int) -> str:
        return str(self.call(ADMIN, "GET", f"/api/v1/jobs/{job_id}").json()["state"])

    def _first_token(self, user: str) -> str:
        """A user's first token (made as `gpuyard token create` does, with their own login;
        the rest they make through the API)."""
        assert self.server.accounts is not None
        actor = Principal(user, "user", None, "submit")
        secret, _ = self.server.accounts.create_token(actor)
        return secret

    @staticmethod
    def _bearer(secret: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {secret}"}

    def job_body(self) -> dict[str, Any]:
        return {"command": ["true"], "workdir": "/"}

    def sweep_body(self) -> dict[str, Any]:
        return {"sweep": {"command": ["true", "{x}"], "parameters": {"x": [1, 2]}}, "workdir": "/"}

    @contextlib.contextmanager
    def as_(self, caller: str) -> Iterator[dict[str, str]]:
        """The headers `caller` sends; a socket peer's requests carry the owner's uid."""
        self.app.uid = pwd.getpwnam(OWNER).pw_uid if caller == SOCKET_PEER else None
        try:
            yield self.headers[caller]
        finally:
            self.app.uid = None

    def call(self, caller: str, method: str, path: str, body: Any = None) -> Any:
        with self.as_(caller) as headers:
            return self.client.request(method, path, json=body, headers=headers)

    def first_bytes(self, caller: str, path: str) -> int:
        """The status of a stream that never ends by itself (the change feed): read until
        the first bytes of the body, then hang up."""
        with (
            self.as_(caller) as headers,
            self.client.stream("GET", path, headers=headers) as answer,
        ):
            if answer.status_code == 200:
                next(answer.iter_bytes())
            return answer.status_code

    def path_for(self, path: str) -> str:
        """`path` with its parameters naming a fresh resource of the owner's."""
        if "{job_id}" in path:
            made = self.call(USER, "POST", "/api/v1/jobs", self.job_body())
            assert made.status_code == 201, made.text
            return path.replace("{job_id}", str(made.json()["id"]))
        if "{array_id}" in path:
            made = self.call(USER, "POST", "/api/v1/jobs", {**self.job_body(), "array": "0-1"})
            assert made.status_code == 201, made.text
            return path.replace("{array_id}", str(made.json()["array_job_id"]))
        if "{sweep_id}" in path:
            made = self.call(USER, "POST", "/api/v1/sweeps", self.sweep_body())
            assert made.status_code == 201, made.text
            return path.replace("{sweep_id}", str(made.json()["id"]))
        if "{token_id}" in path:
            made = self.call(USER, "POST", "/api/v1/tokens", {"scope": "read"})
            assert made.status_code == 201, made.text
            return path.replace("{token_id}", str(made.json()["id"]))
        if path.startswith("/api/v1/nodes/"):  # the one machine: the server's own
            return path.replace("{name}", self.server.gpus.machines()[0].name)
        return path.replace("{index}", "1").replace("{kind}", "user").replace("{name}", VICTIM)


@pytest.fixture(scope="module", params=["local", "ray"])
def rig(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    """One server per backend: on Ray (a local cluster of two machines, each job through its
    machine's agent) every caller gets exactly what it gets on one box."""
    state: Path = tmp_path_factory.mktemp("matrix") / "state"
    settings = Settings(state_dir=state, gpus="2", cpus=4, kill_grace_s=1)
    if request.param == "ray":
        pytest.importorskip("ray")
        settings = Settings(state_dir=state, kill_grace_s=1, backend="ray",
                            ray_local_nodes="2x2x4", ray_node_timeout_s=5)  # fmt: skip
    server, app = build_app(settings)
    server.access.throttle.burst = 1_000_000  # the bad and expired tokens fail on every route
    wrapped = ClientPerRequest(app)
    with TestClient(wrapped, base_url=settings.url) as client:
        yield Rig(server, wrapped, client, settings, machines=2 if request.param == "ray" else 1)
        cancel_unfinished(server)


def _routes(rig: Rig) -> list[tuple[str, str]]:
    spec = rig.call(NONE, "GET", "/openapi.json").json()
    return [(method.upper(), path) for path, item in spec["paths"].items() for method in item]


def test_every_route_in_openapi_declares_who_may_call_it(rig: Rig) -> None:
    routes = _routes(rig)
    missing = [f"{m} {p}" for m, p in routes if (m, p) not in RULES]
    assert not missing, f"routes with no entry in the authorisation matrix's RULES: {missing}"


def test_every_caller_kind_is_one_of_the_rules_table() -> None:
    """A row names a caller kind that services/access/rules.py's WHO defines, and every kind
    there is some row's (a rule without a row, or a row without a rule, fails)."""
    used = {rule.who for rule in RULES.values()}
    assert used - WHO.keys() == set(), "rows whose caller kind rules.WHO does not define"
    assert WHO.keys() - used == set(), "caller kinds in rules.WHO that no row uses"


def test_every_caller_gets_what_the_matrix_says_on_every_route(rig: Rig) -> None:
    wrong: list[str] = []
    for method, path in _routes(rig):
        rule = RULES.get((method, path))
        if rule is None:
            continue  # the test above names it
        shared = rig.path_for(path)
        for caller in CALLERS:
            # Each caller meets the owner's resource as it was made (its own fresh one), not
            # as the caller before left it.
            concrete = rig.path_for(path) if rule.who == "owner" else shared
            if path.endswith(("/changes", "/stream")):
                status, text = rig.first_bytes(caller, concrete), ""
            else:
                body = rule.body(rig) if rule.body else None
                answer = rig.call(caller, method, concrete, body)
                status, text = answer.status_code, answer.text[:160]
            want = expected(rule, method, caller)
            if caller == ADMIN and SOCKET and (method, path) in ROOT_REFUSED:
                want = "403"
            if not CLASSES[want](status):
                wrong.append(f"{method} {path} as {caller}: {status}, expected {want} {text}")
    assert not wrong, "\n".join(wrong)


def test_a_refused_caller_learns_nothing_and_changes_nothing(rig: Rig) -> None:
    """Another user's cancel of the owner's job is 404 with the same words as a job that does
    not exist, and the job is still pending afterwards."""
    job = rig.call(USER, "POST", "/api/v1/jobs", rig.job_body()).json()["id"]
    theirs = rig.call(OTHER_USER, "POST", f"/api/v1/jobs/{job}/cancel")
    nobodys = rig.call(OTHER_USER, "POST", "/api/v1/jobs/999999/cancel")
    assert theirs.status_code == nobodys.status_code == 404
    assert theirs.json()["error"]["message"] == nobodys.json()["error"]["message"].replace(
        "999999", str(job)
    )
    assert rig.state(job) == "PENDING"
