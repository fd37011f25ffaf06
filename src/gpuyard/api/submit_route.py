"""`POST /api/v1/jobs` served without FastAPI's per-request machinery: the hottest route.

FastAPI's routing, dependency solving, body handling and response wrapping cost about as much
CPU per submit as the submit itself (profiled: ~60% of the app's time for this route). This
ASGI middleware sits inside the front door (the principal is in the scope, the body bounded)
and answers the submit itself, with exactly the FastAPI route's parse (JSON chosen by content
type, then `JobSubmitIn`), use case, response and error bodies. The FastAPI route stays
registered: it documents the route in OpenAPI, and the tests hold this path to its answers.
"""

from __future__ import annotations

import email.message
import json
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter, ValidationError
from starlette.types import ASGIApp, Receive, Scope, Send

from gpuyard.api.convert import job_to_wire, spec_from_wire
from gpuyard.api.errors import BAD_BODY, describe_invalid, error_response, status_of
from gpuyard.domain.errors import GpuyardError, Unauthorized
from gpuyard.domain.principal import Principal
from gpuyard.schemas.v1 import JobSubmitIn
from gpuyard.services.crashpoints import crash_point
from gpuyard.services.jobs import JobService

SUBMIT_PATH = "/api/v1/jobs"
_SUBMIT_IN: TypeAdapter[JobSubmitIn] = TypeAdapter(JobSubmitIn)
_JSON = b"application/json"


class _BadBody(Exception):
    """The body could not be read or decoded at all (FastAPI answers 400)."""


class _Invalid(Exception):
    """The body is not a valid submission (422); `error` is pydantic's first error."""

    def __init__(self, error: Any) -> None:
        super().__init__(error)
        self.error = error


async def submit(service: JobService, body: JobSubmitIn, actor: Principal, home: str) -> bytes:
    """Queue the job durably; the answer is the job as JSON. No pass has seen it yet: its
    reason is the record's ("None"); asking the scheduler would make the hottest route wait."""
    spec = spec_from_wire(body, home, service.preemptible_default)
    job = await service.submit_async(spec, actor)
    fresh = job_to_wire(job, job.reason, service.log_path(job.id))
    fresh.hint = service.hint(job.spec, actor)
    return fresh.model_dump_json().encode()


class SubmitFastPath:
    """ASGI middleware answering `POST /api/v1/jobs`; every other request passes through."""

    def __init__(self, app: ASGIApp, service: JobService) -> None:
        self._app = app
        self._service = service
        self._home = str(Path.home())  # the default workdir; looked up once, not per submit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != SUBMIT_PATH or scope["method"] != "POST":
            await self._app(scope, receive, send)
            return
        try:
            answer = await self._submit(scope, receive)
            crash_point("submit_reply")
        except GpuyardError as exc:
            await error_response(status_of(exc), exc.code, exc.message, exc.field)(
                scope, receive, send
            )
            return
        except _BadBody:
            await error_response(400, "invalid_request", BAD_BODY)(scope, receive, send)
            return
        except _Invalid as exc:
            message, field = describe_invalid(exc.error)
            await error_response(422, "invalid_request", message, field)(scope, receive, send)
            return
        headers = [(b"content-length", b"%d" % len(answer)), (b"content-type", _JSON)]
        await send({"type": "http.response.start", "status": 201, "headers": headers})
        await send({"type": "http.response.body", "body": answer})

    async def _submit(self, scope: Scope, receive: Receive) -> bytes:
        body = _parse(await _read_body(receive), _content_type(scope))
        principal = scope.get("state", {}).get("principal")
        if not isinstance(principal, Principal):  # only if the front door left it public
            raise Unauthorized("this route needs the API token")
        return await submit(self._service, body, principal, self._home)


async def _read_body(receive: Receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _BadBody
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


def _content_type(scope: Scope) -> bytes | None:
    for name, value in scope["headers"]:
        if name == b"content-type":
            return bytes(value)
    return None


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
