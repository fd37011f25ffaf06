"""The front door: every request is authenticated from its headers before its body is read,
and no body larger than the server accepts is ever held in memory.

FastAPI reads and parses a route's body before its dependencies run, so a bearer-token
dependency alone lets anyone make the server parse (and hold) any body; an 800 MiB body without
a token once took 600 MiB and 8 s. This ASGI middleware answers 401 from the headers, 413 from a
too large Content-Length, and stops a body that grows past the limit while it streams.
"""

from __future__ import annotations

import json
from collections.abc import Collection

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gpuyard.domain.errors import Forbidden, PayloadTooLarge, Unauthorized
from gpuyard.services.auth import TokenAuth

MAX_BODY_BYTES = 4 << 20  # a submit is a few KiB; spec rules cap argv and env well below this
_READS = frozenset({"GET", "HEAD"})
_READ_ONLY = "this token's scope is read: it may only read (GET); use one with scope submit"
PUBLIC_PATHS = frozenset({"/healthz", "/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc"})


class FrontDoor:
    """Authenticate, then bound the body; the principal goes to the routes in
    `scope["state"]["principal"]`."""

    def __init__(
        self,
        app: ASGIApp,
        auth: TokenAuth,
        *,
        max_body_bytes: int = MAX_BODY_BYTES,
        public: Collection[str] = PUBLIC_PATHS,
    ) -> None:
        self._app = app
        self._auth = auth
        self._max = max_body_bytes
        self._public = public

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        if scope["path"] not in self._public:
            try:
                principal = self._auth.authenticate(headers.get(b"authorization", b""))
            except Unauthorized as exc:
                await _answer(send, 401, exc.code, exc.message, {"WWW-Authenticate": "Bearer"})
                return
            if not principal.may_change and scope["method"] not in _READS:
                await _answer(send, 403, Forbidden.code, _READ_ONLY)
                return
            scope.setdefault("state", {})["principal"] = principal
        length = headers.get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self._max):
            await _answer(send, 413, PayloadTooLarge.code, self._too_large())
            return
        await self._app(scope, self._bounded(receive), send)

    def _too_large(self) -> str:
        return f"the request body is larger than {self._max >> 20} MiB; send less"

    def _bounded(self, receive: Receive) -> Receive:
        """`receive` that refuses a streamed body growing past the limit."""
        seen = 0

        async def bounded() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self._max:
                    raise PayloadTooLarge(self._too_large())
            return message

        return bounded


async def _answer(
    send: Send, status: int, code: str, message: str, extra: dict[str, str] | None = None
) -> None:
    body = json.dumps({"error": {"code": code, "message": message}}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    headers += [(k.lower().encode(), v.encode()) for k, v in (extra or {}).items()]
    # The body was not read: the connection cannot be reused for a next request.
    headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
