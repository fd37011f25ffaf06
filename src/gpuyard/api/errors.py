"""One table from exceptions to HTTP statuses, and one error body shape."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from gpuyard.domain.errors import (
    Conflict,
    Forbidden,
    GpuyardError,
    InvalidRequest,
    NotFound,
    PayloadTooLarge,
    QuotaExceeded,
    StateDiskFull,
    Unauthorized,
    Unavailable,
)

log = logging.getLogger("gpuyard.api")

STATUS_BY_ERROR: dict[type[GpuyardError], int] = {
    InvalidRequest: 422,
    NotFound: 404,
    Conflict: 409,
    Unauthorized: 401,
    Forbidden: 403,
    PayloadTooLarge: 413,
    QuotaExceeded: 429,
    Unavailable: 503,
    StateDiskFull: 507,  # WebDAV's Insufficient Storage: the one status that says it
}
_CODE_BY_HTTP = {400: "invalid_request", 401: "unauthorized", 403: "forbidden",
                 404: "not_found", 405: "method_not_allowed", 409: "conflict",
                 413: "payload_too_large", 422: "invalid_request"}  # fmt: skip


# What a person sending a job by hand (curl) needs to hear when the body is not one.
SEND_JSON = 'send it with Content-Type: application/json, e.g. {"command": ["python", "train.py"]}'
BAD_BODY = "the request body could not be decoded as JSON (not UTF-8, or nested too deep)"
_STARLETTE_BAD_BODY = "There was an error parsing the body"


def status_of(exc: GpuyardError) -> int:
    """The status of the nearest class in the error's ancestry that has one (a subclass of
    NotFound answers 404)."""
    for cls in type(exc).__mro__:
        status = STATUS_BY_ERROR.get(cls)
        if status is not None:
            return status
    return 400


def headers_of(exc: GpuyardError) -> dict[str, str] | None:
    """The headers an error answers with besides its body: when to try again, for an error
    that names it (a database that did not answer within the request's deadline, writes
    paused while the server takes its database back)."""
    if exc.retry_after_s is not None:
        return {"Retry-After": str(round(exc.retry_after_s))}
    return None


def error_response(
    status: int,
    code: str,
    message: str,
    field: str | None = None,
    headers: Mapping[str, str] | None = None,
) -> JSONResponse:
    extra = dict(headers or {})
    if status == 401:
        extra["WWW-Authenticate"] = "Bearer"
    return JSONResponse(error_body(code, message, field), status_code=status, headers=extra or None)


def error_body(code: str, message: str, field: str | None = None) -> dict[str, Any]:
    """The one shape of every error the API answers: `{"error": {"code", "message"[, "field"]}}`."""
    body: dict[str, Any] = {"code": code, "message": message}
    if field is not None:
        body["field"] = field
    return {"error": body}


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(GpuyardError)
    async def _domain(_: Request, exc: GpuyardError) -> JSONResponse:
        return error_response(status_of(exc), exc.code, exc.message, exc.field, headers_of(exc))

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        return error_response(422, "invalid_request", *describe_invalid(first))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = _CODE_BY_HTTP.get(exc.status_code, "error")
        message = "no such API route" if exc.status_code == 404 else str(exc.detail)
        if exc.status_code == 400 and message == _STARLETTE_BAD_BODY:
            message = BAD_BODY
        headers = exc.headers
        if exc.status_code == 405:
            allowed = _allowed_methods(request)
            headers = {**(headers or {}), "Allow": allowed}
            message = f"this route does not take {request.method}; it takes {allowed}"
        return error_response(exc.status_code, code, message, headers=headers)

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
        log.exception("internal error")
        return error_response(500, "internal", "internal server error; the server log has details")


def _allowed_methods(request: Request) -> str:
    """Every method some route takes at this path (Starlette names only the first route's
    when several routes share a path, one per method)."""
    allowed = []
    for method in ("GET", "POST", "PUT", "PATCH", "DELETE"):
        scope = {**request.scope, "method": method}
        if any(route.matches(scope)[0] is Match.FULL for route in request.app.router.routes):
            allowed.append(method)
    return ", ".join(allowed)


def describe_invalid(error: Any) -> tuple[str, str | None]:
    """A one-line message naming the field and the problem."""
    loc = [str(p) for p in error.get("loc", ()) if p not in ("body", "query", "path")]
    field = ".".join(loc) or None
    kind = error.get("type", "")
    if not loc and kind == "missing":
        return f"the request body is empty: {SEND_JSON}", None
    if not loc and kind in ("model_attributes_type", "model_type", "dict_type"):
        return f"the request body must be a JSON object: {SEND_JSON}", None
    if kind == "json_invalid":
        return "the request body is not valid JSON", None
    if kind == "extra_forbidden":
        return f"unknown field {field!r}", field
    if kind == "missing":
        return f"field {field!r} is required", field
    message = error.get("msg", "invalid value")
    return (f"{field}: {message}" if field else message), field
