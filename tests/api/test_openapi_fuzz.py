"""An OpenAPI fuzzer against the running server (issue 11): schemathesis generates requests
from the server's own OpenAPI document (valid ones, and ones that break the schema) for every
operation, sends them over HTTP to a server on loopback (uvicorn with the server's own
protocol, the app built as `gpuyard server` builds it), and every answer must be no 5xx, a
status the operation declares, the declared content type and a body of the declared schema.

Two passes: a user's submit token on every operation (the job verbs most times aimed at one
of the user's own pending jobs, else at a generated id), then the admin's on every operation
that names no job (an admin's cancel, requeue or restart could free the CPUs below and let a
generated command run). A job of the admin's holds every CPU, so no generated job ever runs;
the user's pending quota is what the user's jobs reach, so the quota's refusal is fuzzed too.
Streams that end only with their job (the change feed, a followed log) are not fuzzed.

`GPUYARD_FUZZ_EXAMPLES` (default 12) sets the examples per operation and mode; the examples
are derandomised in `make test` (the same requests every run) unless `GPUYARD_FUZZ_SEED` is
set, to look further."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from gpuyard.api.http_server import GuardedHttpProtocol
from gpuyard.bootstrap import build_app
from gpuyard.domain.principal import Principal
from gpuyard.services.server import ServerFacade
from gpuyard.settings import Settings
from tests.api.served import served

FUZZER = "gyfuzz"
EXAMPLES = int(os.environ.get("GPUYARD_FUZZ_EXAMPLES", "12"))
SEED = os.environ.get("GPUYARD_FUZZ_SEED")
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]
# Streams that never end by themselves: the matrix reads them.
NEVER_ENDS = frozenset({"/api/v1/jobs/changes", "/api/v1/gpus/stream", "/api/v1/events/stream"})


@dataclass
class LiveServer:
    """The server on a loopback port, its admin token and a user's."""

    server: ServerFacade
    url: str
    admin_token: str
    user_token: str = ""
    jobs: list[int] = field(default_factory=list)  # the user's, pending for ever
    session: requests.Session = field(default_factory=requests.Session)

    def new_user_token(self) -> None:
        """A fresh token for the fuzzing user (a generated DELETE may revoke the last one,
        a generated disable may switch the account off)."""
        assert self.server.accounts is not None
        admin = self.server.auth.principal
        if any(a.name == FUZZER and a.disabled for a in self.server.accounts.users(admin)):
            self.server.accounts.enable_user(admin, FUZZER)
        secret, _ = self.server.accounts.create_token(Principal(FUZZER, "user", None, "submit"))
        self.user_token = secret


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    state: Path = tmp_path_factory.mktemp("fuzz") / "state"
    made = Settings(state_dir=state, port=_free_port(), gpus="2", cpus=4, kill_grace_s=1)
    server, app = build_app(made)
    protocol = type("FuzzedHttpProtocol", (GuardedHttpProtocol,),
                    {"header_timeout_s": 10.0, "max_connections": 256})  # fmt: skip
    with served(server, app, made.host, made.port, protocol):
        live = LiveServer(server, made.url, made.token_path.read_text().strip())
        try:
            admin = {"Authorization": f"Bearer {live.admin_token}"}
            added = live.session.post(f"{live.url}/api/v1/admin/users", json={"name": FUZZER,
                                      "unix_user": "nobody"}, headers=admin)  # fmt: skip
            assert added.status_code == 201, added.text
            live.new_user_token()
            # Every CPU the server has, held by a job nothing generated can stop (not
            # preemptible; the user's verbs cannot see it; the admin pass names no job).
            blocker = {"command": ["sleep", "600"], "cpus": made.cpus, "workdir": "/"}
            started = live.session.post(f"{live.url}/api/v1/jobs", json=blocker, headers=admin)
            assert started.status_code == 201, started.text
            deadline = time.monotonic() + 30
            while server.reads.get(started.json()["id"], server.auth.principal).state.value != (
                "RUNNING"
            ):
                assert time.monotonic() < deadline, "the blocking job did not start"
                time.sleep(0.02)
            user = {"Authorization": f"Bearer {live.user_token}"}
            for _ in range(4):
                mine = live.session.post(f"{live.url}/api/v1/jobs", headers=user,
                                         json={"command": ["true"], "workdir": "/"})  # fmt: skip
                assert mine.status_code == 201, mine.text
                live.jobs.append(mine.json()["id"])
            # A quota the user's generated submits reach: its refusal must be a declared
            # answer too.
            limit = live.session.put(f"{live.url}/api/v1/admin/limits/user/{FUZZER}",
                                     json={"max_pending": 4}, headers=admin)  # fmt: skip
            assert limit.status_code == 200, limit.text
            yield live
        finally:
            live.session.close()


def _fuzz(live: LiveServer, token: Callable[[], str], wanted: Callable[[str, str], bool]) -> None:
    schema = schemathesis.openapi.from_url(f"{live.url}/openapi.json")
    failures: list[str] = []
    ran = 0
    for result in schema.get_all_operations():
        operation = result.ok()
        if not wanted(operation.method.upper(), operation.path):
            continue
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            ran += 1
            strategy = operation.as_strategy(generation_mode=mode)
            if "{job_id}" in operation.path and mode is GenerationMode.POSITIVE:
                strategy = st.tuples(strategy, st.sampled_from([None, *live.jobs])).map(_aimed)
            try:
                _run(live, strategy, token)
            except Unsatisfiable:  # nothing of it can be made invalid (no parameters, a string)
                assert mode is GenerationMode.NEGATIVE, operation.path
            except (Exception, BaseExceptionGroup) as exc:  # each operation and mode, then on
                failures.append(f"{operation.method.upper()} {operation.path} ({mode}): {exc}")
    assert ran > 20, "the fuzzer found too few operations in the server's OpenAPI"
    assert not failures, "\n\n".join(failures)


def _aimed(pair: tuple[Any, int | None]) -> Any:
    """The case, most times at one of the user's own jobs (a generated id rarely is one)."""
    case, job_id = pair
    if job_id is not None:
        case.path_parameters["job_id"] = job_id
    return case


def _run(live: LiveServer, strategy: Any, token: Callable[[], str]) -> None:
    @settings(
        max_examples=EXAMPLES, deadline=None, database=None, derandomize=SEED is None,
        phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck),
    )  # fmt: skip
    @given(case=strategy)
    def one(case: Any) -> None:
        headers = {"Authorization": f"Bearer {token()}"}
        if case.path.endswith("/log") and case.query:
            case.query.pop("follow", None)  # follows a pending job's log until it ends
        response = case.call(base_url=live.url, session=live.session, headers=headers,
                             timeout=30)  # fmt: skip
        try:
            case.validate_response(response, checks=CHECKS)
        except (Exception, BaseExceptionGroup) as exc:
            raise AssertionError(f"{case.as_curl_command()}\n-> {response.status_code} "
                                 f"{response.text[:300]}\n{exc}") from None  # fmt: skip
        if response.status_code == 401 or (case.method == "DELETE" and response.status_code < 300):
            live.new_user_token()

    if SEED is not None:
        one = seed(int(SEED))(one)
    one()


def test_a_body_that_cannot_be_decoded_is_a_400_every_body_route_declares(
    live: LiveServer,
) -> None:
    """The fuzzer's first find: a body that is not UTF-8 is answered 400 (in words), which
    OpenAPI did not declare; now every route that takes a body does, with the error shape."""
    spec = live.session.get(f"{live.url}/openapi.json").json()
    with_body = [(m, p, op) for p, item in spec["paths"].items() for m, op in item.items()
                 if "requestBody" in op]  # fmt: skip
    assert len(with_body) >= 8
    for method, path, operation in with_body:
        declared = operation["responses"].get("400", {})
        assert "ErrorOut" in str(declared), f"{method.upper()} {path} does not declare its 400"
    answer = live.session.post(
        f"{live.url}/api/v1/jobs", data=b'{"command": ["\xff"]}',
        headers={"Authorization": f"Bearer {live.user_token}",
                 "Content-Type": "application/json"},
    )  # fmt: skip
    assert answer.status_code == 400
    assert "could not be decoded as JSON" in answer.json()["error"]["message"]


def test_a_quota_refusal_is_a_429_every_route_declares(live: LiveServer) -> None:
    """The second find: a submit past the user's pending quota is 429, which OpenAPI did not
    declare; now every route declares it (the failure throttle can answer it anywhere), with
    421 (a Host not this server's) and 503."""
    spec = live.session.get(f"{live.url}/openapi.json").json()
    for path, item in spec["paths"].items():
        for method, operation in item.items():
            for status in ("421", "429", "503"):
                assert "ErrorOut" in str(operation["responses"].get(status, {})), (
                    f"{method.upper()} {path} does not declare {status}"
                )
    user = {"Authorization": f"Bearer {live.user_token}"}
    body = {"command": ["true"], "workdir": "/"}
    answers = [live.session.post(f"{live.url}/api/v1/jobs", json=body, headers=user)
               for _ in range(len(live.jobs) + 1)]  # fmt: skip
    refused = answers[-1]
    assert refused.status_code == 429, refused.text
    assert "the most allowed is 4" in refused.json()["error"]["message"]


def test_fuzzing_every_operation_as_a_user_gets_no_5xx_and_only_declared_answers(
    live: LiveServer,
) -> None:
    _fuzz(live, lambda: live.user_token, lambda method, path: path not in NEVER_ENDS)


def test_fuzzing_the_operations_naming_no_job_as_an_admin_gets_the_same(live: LiveServer) -> None:
    _fuzz(
        live, lambda: live.admin_token,
        lambda method, path: path not in NEVER_ENDS and "{job_id}" not in path,
    )  # fmt: skip
