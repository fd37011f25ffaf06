"""`POST /api/v1/jobs` served without FastAPI's per-request machinery: the hottest route.

FastAPI's routing, dependency solving, body handling and response wrapping cost about as much
CPU per submit as the submit itself (profiled: ~60% of the app's time for this route). This
ASGI middleware sits inside the front door (the principal is in the scope, the body bounded)
and answers the submit itself, with exactly the FastAPI route's parse (JSON chosen by content
type, then `JobSubmitIn`), use case, response and error bodies. The FastAPI route stays
registered: it documents the route in OpenAPI, and the tests hold this path to its answers.

An `Idempotency-Key` header (1 to 255 printable ASCII characters; the CLI and the SDK send a
fresh uuid4 with every submit) makes a retried submit safe: the first request with a key is
answered 201 with its new job; any later one with the same key from the same user is answered
200, `Idempotent-Replayed: true`, with the same job as it is now (`services/jobs/submit_keys.py`).
A malformed key is 400; the key reused for a different job is 422.

A body with `array` (sbatch's `--array 0-99%8`) makes one task (job) per index in one durable
write (`JobSubmits.submit_array_async`), and is answered 201 with the first task, whose id is
the array's (`array_job_id`); a retry with the same key answers that task, never a second array.
"""

from __future__ import annotations

import email.message
import json
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter, ValidationError
from starlette.types import ASGIApp, Receive, Scope, Send

from gpuyard.api.convert import job_fields, spec_from_wire
from gpuyard.api.errors import (
    BAD_BODY,
    describe_invalid,
    error_response,
    headers_of,
    status_of,
)
from gpuyard.api.wire_json import WireList
from gpuyard.domain.arrays import parse_array
from gpuyard.domain.errors import GpuyardError, Unauthorized
from gpuyard.domain.job import JobSpec
from gpuyard.domain.machine_share import DEFAULT_MEM_HINT
from gpuyard.domain.principal import Principal
from gpuyard.domain.units import bare_size_hint, format_size_mib
from gpuyard.schemas.v1 import JobOut, JobSubmitIn
from gpuyard.services.jobs.crashpoints import crash_point
from gpuyard.services.server import ServerFacade

SUBMIT_PATH = "/api/v1/jobs"
_SUBMIT_IN: TypeAdapter[JobSubmitIn] = TypeAdapter(JobSubmitIn)
_JOB_OUT = WireList(JobOut)  # JobOut's bytes without building one (its 60-odd fields)
_JSON = b"application/json"
IDEMPOTENCY_KEY = "Idempotency-Key"
MAX_KEY_CHARS = 255
# On a 200 that answers a retried submit with the job an earlier request made (Stripe's name).
REPLAYED_HEADER = "Idempotent-Replayed"
_KEY_HEADER = IDEMPOTENCY_KEY.lower().encode()
_REPLAYED = [(REPLAYED_HEADER.lower().encode(), b"true")]


class BadIdempotencyKey(GpuyardError):
    """The Idempotency-Key header is not one key of 1 to 255 printable characters (HTTP 400:
    the error table has no status for it, so the base class's)."""

    code = "invalid_request"


def idempotency_key_of(values: list[str]) -> str | None:
    """The request's key from its `Idempotency-Key` header values (latin-1 text); None: none
    sent. BadIdempotencyKey for several, an empty one, a longer one or other characters."""
    if not values:
        return None
    if len(values) > 1:
        raise BadIdempotencyKey(
            f"send one {IDEMPOTENCY_KEY} header, not {len(values)}", field=IDEMPOTENCY_KEY
        )
    key = values[0]
    if not 0 < len(key) <= MAX_KEY_CHARS or not (key.isascii() and key.isprintable()):
        raise BadIdempotencyKey(
            f"the {IDEMPOTENCY_KEY} header must be 1 to {MAX_KEY_CHARS} printable ASCII "
            "characters (a fresh uuid4 per job is a good key)",
            field=IDEMPOTENCY_KEY,
        )
    return key


class _BadBody(Exception):
    """The body could not be read or decoded at all (FastAPI answers 400)."""


class _Invalid(Exception):
    """The body is not a valid submission (422); `error` is pydantic's first error."""

    def __init__(self, error: Any) -> None:
        super().__init__(error)
        self.error = error


async def submit(
    server: ServerFacade,
    body: JobSubmitIn,
    actor: Principal,
    home: str,
    idempotency_key: str | None = None,
) -> tuple[bytes, bool]:
    """Queue the job durably; the answer is the job as JSON, and whether it is a replay (an
    earlier request with `idempotency_key` made the job). No pass has seen a new job yet: its
    reason is the record's ("None"); asking the scheduler would make the hottest route wait."""
    submits, reads = server.submits, server.reads
    spec = spec_from_wire(body, submits.owner_home(actor) or home, submits.preemptible_default)
    if body.array is not None:  # one task per index, one write; the answer: the first task
        indices = parse_array(body.array).indices
        specs = [spec] * len(indices)
        if idempotency_key is None:
            job, replayed = (await submits.submit_array_async(specs, indices, actor))[0], False
        else:
            job, replayed = await submits.submit_array_once_async(
                specs, indices, actor, idempotency_key
            )
    elif idempotency_key is None:
        job, replayed = await submits.submit_async(spec, actor), False
    else:
        job, replayed = await submits.submit_once_async(spec, actor, idempotency_key)
    reason = reads.reason(job) if replayed else job.reason
    out = job_fields(job, reason, reads.log_path(job.id), plain=True)
    out["hint"] = _hints(server, body, job.spec, actor)
    return _JOB_OUT.dump_one(out), replayed


def _hints(server: ServerFacade, body: JobSubmitIn, spec: JobSpec, actor: Principal) -> str | None:
    """Advice printed after the job's id: a --gpu-mem from earlier runs, a `--mem 16` that is
    16 MiB, a --mem this server does not hold the job to (no cgroups), and the server's
    default memory a job without --mem got (Slurm shows its DefMemPerCPU in `scontrol show
    job`; here it is said at once, since a training job may need more)."""
    confinement = server.info.confinement
    unheld = confinement.startswith("none")
    advisory = body.mem is not None and unheld
    why = confinement[confinement.find("(") + 1 : confinement.find(")")] or confinement
    hints = [
        server.gpus.hint(spec, actor), bare_size_hint(body.mem),
        f"--mem is advisory on this server ({why}): the job is not held to it"
        if advisory else None,
        _default_mem_hint(server, spec) if body.mem is None and spec.mem_mib else None,
    ]  # fmt: skip
    return "; ".join(hint for hint in hints if hint) or None


def _default_mem_hint(server: ServerFacade, spec: JobSpec) -> str:
    """The memory limit a job without --mem got: the server's default per CPU, for its CPUs."""
    per_cpu = server.submits.default_mem_per_cpu_mib
    held = "counted (not held: no cgroups here)" if server.info.confinement.startswith("none") \
        else "held"  # fmt: skip
    how = (f"{format_size_mib(per_cpu)} per CPU x {spec.cpus}" if per_cpu * spec.cpus ==
           spec.mem_mib else "all the largest machine has")  # fmt: skip
    return (f"{DEFAULT_MEM_HINT} the job is {held} to the default "
            f"{format_size_mib(spec.mem_mib)} of host RAM, {how} (--mem to change it)")  # fmt: skip


class SubmitFastPath:
    """ASGI middleware answering `POST /api/v1/jobs`; every other request passes through."""

    def __init__(self, app: ASGIApp, server: ServerFacade) -> None:
        self._app = app
        self._server = server
        self._home = str(Path.home())  # the default workdir; looked up once, not per submit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != SUBMIT_PATH or scope["method"] != "POST":
            await self._app(scope, receive, send)
            return
        try:
            answer, replayed = await self._submit(scope, receive)
            crash_point("submit_reply")
        except GpuyardError as exc:
            await error_response(
                status_of(exc), exc.code, exc.message, exc.field, headers_of(exc)
            )(scope, receive, send)
            return
        except _BadBody:
            await error_response(400, "invalid_request", BAD_BODY)(scope, receive, send)
            return
        except _Invalid as exc:
            message, field = describe_invalid(exc.error)
            await error_response(422, "invalid_request", message, field)(scope, receive, send)
            return
        headers = [(b"content-length", b"%d" % len(answer)), (b"content-type", _JSON)]
        if replayed:
            headers += _REPLAYED
        status = 200 if replayed else 201
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": answer})

    async def _submit(self, scope: Scope, receive: Receive) -> tuple[bytes, bool]:
        content_type, keys = _headers(scope)
        body = _parse(await _read_body(receive), content_type)
        principal = scope.get("state", {}).get("principal")
        if not isinstance(principal, Principal):  # only if the front door left it public
            raise Unauthorized("this route needs the API token")
        key = idempotency_key_of(keys) if keys else None
        return await submit(self._server, body, principal, self._home, key)


async def _read_body(receive: Receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _BadBody
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


def _headers(scope: Scope) -> tuple[bytes | None, list[str]]:
    """The content type (the first), and every Idempotency-Key value, in one pass."""
    content_type = None
    keys: list[str] = []
    for name, value in scope["headers"]:
        if name == b"content-type":
            if content_type is None:
                content_type = bytes(value)
        elif name == _KEY_HEADER:
            keys.append(bytes(value).decode("latin-1"))
    return content_type, keys


def _parse(body: bytes, content_type: bytes | None) -> JobSubmitIn:
    """FastAPI's rules: no body is a missing body; JSON only when the content type says so
    (none given: not JSON); anything else is validated as it is, and refused."""
    if not body:
        raise _Invalid({"type": "missing", "loc": ()})
    value: Any = body
    if content_type is not None and _is_json(content_type):
        try:
            value = json.loads(body)
        except json.JSONDecodeError:
            raise _Invalid({"type": "json_invalid", "loc": ()}) from None
        except Exception as exc:  # not UTF-8/16/32, nested too deep
            raise _BadBody from exc
    try:
        return _SUBMIT_IN.validate_python(value, from_attributes=True)
    except ValidationError as exc:
        raise _Invalid(exc.errors()[0]) from None


def _is_json(content_type: bytes) -> bool:
    if content_type == _JSON:
        return True
    message = email.message.Message()
    message["content-type"] = content_type.decode("latin-1")
    if message.get_content_maintype() != "application":
        return False
    subtype = message.get_content_subtype()
    return subtype == "json" or subtype.endswith("+json")
