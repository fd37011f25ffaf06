"""What `/openapi.json` says of who may call a route and what its answers are, beyond what
FastAPI derives: authentication is the front door's (an ASGI middleware, `front_door.py`), not
a route dependency, so FastAPI sees no security scheme; this module declares them.

Schemes: `bearerAuth` (an account's API token, scope read, submit or admin: `gpuyard token
create`; the first admin's is in the state dir's `token` file), `metricsToken` (the scraper's
token, `metrics-token`, which reaches `GET /metrics` only) and the dashboard's session (the
cookie `gpuyard_session_PORT` *and* the `X-Session-Key` header, both at once: the cookie
alone admits nobody). A root server's Unix socket authenticates its caller from the kernel,
which OpenAPI cannot say; the description does. Public routes (`front_door.PUBLIC_PATHS`)
declare no requirement. The media types of the text routes (a job's log, the streams,
`/metrics`) are declared at their routes (`LOG_ANSWER`, `EVENT_STREAM`, `PROMETHEUS_TEXT`).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from fastapi import FastAPI

BEARER = "bearerAuth"
METRICS_TOKEN = "metricsToken"
SESSION_COOKIE = "dashboardSession"
SESSION_KEY = "dashboardSessionKey"
METRICS_PATH = "/metrics"

DESCRIPTION = (
    "gpuyard's REST API. Authentication: `Authorization: Bearer <token>` (an account's API "
    "token: `gpuyard token create`), or the dashboard's session (its cookie and the "
    "`X-Session-Key` header together, for the dashboard's own page). On a root server's Unix "
    "socket the kernel says who the caller is, and no token is needed."
)


def _text(media_type: str, description: str) -> dict[str, Any]:
    return {"description": description, "content": {media_type: {"schema": {"type": "string"}}}}


# The 200 answers of the routes that do not answer JSON (`responses={200: ...}` at each).
_COUNT = {"type": "string", "pattern": "^[0-9]+$"}
LOG_ANSWER = {
    **_text("text/plain", "The job's output, as the job wrote it"),
    "headers": {
        "X-Log-Start": {"description": "the byte of the log the body starts at",
                        "required": True, "schema": _COUNT},
        "X-Log-Offset": {"description": "where to ask for the rest (not when following)",
                         "schema": _COUNT},
        "X-Job-State": {"description": "the job's state when the log was opened",
                        "required": True, "schema": {"type": "string"}},
    },
}  # fmt: skip
EVENT_STREAM = _text(
    "text/event-stream",
    "Server-sent events (`event:` and `data:` lines, `data` a JSON object); the stream stays "
    "open until the client closes it",
)
PROMETHEUS_TEXT = _text(
    "text/plain; version=0.0.4", "Prometheus' text exposition format, version 0.0.4"
)


def security_schemes(cookie_name: str) -> dict[str, dict[str, Any]]:
    """The schemes a client can use, as OpenAPI's `components.securitySchemes`."""
    return {
        BEARER: {
            "type": "http", "scheme": "bearer",
            "description": "An account's API token (`gpuyard token create`; scope read: GET "
            "only, submit, or admin); the first admin's is the state dir's `token` file.",
        },
        METRICS_TOKEN: {
            "type": "http", "scheme": "bearer",
            "description": "The scraper's token (the state dir's `metrics-token` file): "
            "`GET /metrics` only.",
        },
        SESSION_COOKIE: {
            "type": "apiKey", "in": "cookie", "name": cookie_name,
            "description": "The dashboard's session cookie, set at its login; it admits only "
            f"with `X-Session-Key` ({SESSION_KEY}), and only without an Authorization header.",
        },
        SESSION_KEY: {
            "type": "apiKey", "in": "header", "name": "X-Session-Key",
            "description": "The dashboard page's key of its session: with the session cookie.",
        },
    }  # fmt: skip


def requirements(path: str, public: Collection[str]) -> list[dict[str, list[str]]]:
    """Who may call `path`: alternatives (any one will do), each a set of schemes (all)."""
    if path in public:
        return []
    session: dict[str, list[str]] = {SESSION_COOKIE: [], SESSION_KEY: []}
    accounts: list[dict[str, list[str]]] = [{BEARER: []}, session]
    return [{METRICS_TOKEN: []}, *accounts] if path == METRICS_PATH else accounts


def install_openapi(app: FastAPI, *, cookie_name: str, public: Collection[str]) -> None:
    """`app.openapi()` is FastAPI's document, built once, with the schemes added and applied
    to every operation."""
    fastapi_openapi = app.openapi

    def build() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        doc = fastapi_openapi()  # FastAPI's, which it also keeps in app.openapi_schema
        doc.setdefault("components", {})["securitySchemes"] = security_schemes(cookie_name)
        for path, operations in doc.get("paths", {}).items():
            for operation in operations.values():
                operation["security"] = requirements(path, public)
        return doc

    app.openapi = build  # type: ignore[method-assign]
