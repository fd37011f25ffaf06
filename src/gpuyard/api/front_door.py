"""The front door: every request is authenticated from its headers before its body is read,
and no body larger than the server accepts is ever held in memory.

FastAPI reads and parses a route's body before its dependencies run, so a bearer-token
dependency alone lets anyone make the server parse (and hold) any body; an 800 MiB body without
a token once took 600 MiB and 8 s. This ASGI middleware answers 401 from the headers, 413 from a
too large Content-Length, and stops a body that grows past the limit while it streams.

A request on the root server's Unix socket carries its caller's credentials from the kernel
(`PEER`, put in the scope by `http_server`); the caller is who the kernel says
(`services/access/peers.py`), with no token, whatever Authorization it sends. Its Host is not
checked (DNS rebinding needs TCP: a browser cannot reach a Unix socket).

The web dashboard's page carries a session instead (`services/access/web_sessions.py`): a
request without an Authorization header, with the cookie `gpuyard_session_PORT` and the header
`X-Session-Key` equal to that session's page key, is the session's principal, asked again of
the credential the session was made with (a revoked token ends it). The cookie alone admits
nobody: browsers send it to every port of the host, so another local user's page gets it; the
key is in the dashboard origin's own storage, and a request whose `Sec-Fetch-Site` says another
page sent it is refused too. The dashboard's own pages (`/ui/...`) need no credential (the login
page is one): the cookie picks the app shell over the login, and with the key they get the
session's principal.
"""

from __future__ import annotations

import asyncio
import hmac
import json
from collections.abc import Collection
from urllib.parse import parse_qs

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gpuyard.api.errors import error_body
from gpuyard.domain import hello
from gpuyard.domain.errors import Forbidden, PayloadTooLarge, Unauthorized
from gpuyard.domain.principal import Principal
from gpuyard.services.access.caps import reserve_refusal
from gpuyard.services.access.front import AccessRules, failure_key
from gpuyard.services.access.peers import PeerAuth
from gpuyard.services.access.rules import SCRAPER
from gpuyard.services.access.tokens import TokenAuth, token_hash
from gpuyard.services.access.web_sessions import Origin, Session, WebSessions

MAX_BODY_BYTES = 4 << 20  # a submit is a few KiB; spec rules cap argv and env well below this
_READS = frozenset({"GET", "HEAD"})
_READ_ONLY = "this token's scope is read: it may only read (GET); use one with scope submit"
PUBLIC_PATHS = frozenset({
    "/", "/healthz", "/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc",
    # Swagger UI's own files, from the package (api/routers/docs.py)
    "/docs/swagger-ui-bundle.js", "/docs/swagger-ui.css", "/docs/redoc.standalone.js",
    "/docs/favicon.png",
})  # fmt: skip
# Methods a browser page may not send another site without its Origin being checked.
_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
# Who a metrics-token request is: it reaches GET /metrics only (`rules.require_scraper`).
METRICS_PRINCIPAL = SCRAPER
# scope["extensions"] key of a Unix socket connection's peer credentials ({"pid", "uid",
# "gid"}), set by the HTTP server from SO_PEERCRED, never from what the client sends.
PEER = "gpuyard.peer"
# scope["extensions"] key of the HTTP server's record of the connection (a dict): "reserve"
# (how many were open when it came: one of the admins' last few), and "release", set here,
# what its close calls to uncount it from its account (`services/access/caps.py`).
CONNECTION = "gpuyard.connection"
SESSION_COOKIE = "gpuyard_session"  # + "_PORT" (`session_cookie`)
KEY_HEADER = b"x-session-key"
UI_PREFIX = "/ui"
# scope["state"] keys: how the principal was authenticated (an `Origin`: the web login link
# makes a session of the same credential), and the web session with its cookie value.
ORIGIN = "origin"
WEB_SESSION = "web_session"
_NO_KEY = (
    "missing or wrong X-Session-Key header: a dashboard session is used only by the dashboard's "
    "own page, which sends its key (reload the page, or log in again at /ui/login)"
)
_OTHER_PAGE = (
    "a dashboard session is used only by the dashboard's own page, not by a page of {site} "
    "(Sec-Fetch-Site): open the dashboard at this server's address"
)
_SESSION_ENDED = "your dashboard session ended ({why}): log in again at /ui/login"


def is_ui(path: str) -> bool:
    """Whether `path` is the dashboard's (pages, static files, login)."""
    return path == UI_PREFIX or path.startswith(UI_PREFIX + "/")


def session_left_s(scope: Scope, sessions: WebSessions) -> float | None:
    """How long the web session a request came with may still live (None: not a session's):
    what it makes (a token) must not outlive it."""
    found = scope.get("state", {}).get(WEB_SESSION)
    return None if found is None else sessions.left_s(found[1])


def session_cookie(port: int) -> str:
    """The session cookie's name for a server on `port`: two dashboards on one host (cookies
    are the host's, whatever the port) keep their own."""
    return f"{SESSION_COOKIE}_{port}"


class FrontDoor:
    """Authenticate, then bound the body; the principal goes to the routes in
    `scope["state"]["principal"]`."""

    def __init__(
        self,
        app: ASGIApp,
        auth: TokenAuth,
        *,
        access: AccessRules | None = None,
        max_body_bytes: int = MAX_BODY_BYTES,
        public: Collection[str] = PUBLIC_PATHS,
        peers: PeerAuth | None = None,
        sessions: WebSessions | None = None,
    ) -> None:
        self._app = app
        self._sessions = sessions
        self._auth = auth
        self._peers = peers
        self._access = access or AccessRules()
        self._cookie = session_cookie(self._access.hosts.port)
        metrics_token = self._access.metrics_token
        self._metrics_header = f"Bearer {metrics_token}".encode() if metrics_token else None
        self._max = max_body_bytes
        self._public = public

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        peer = _peer_uid(scope)
        refusal = self._refusal(scope, headers, local=peer is not None)
        if refusal is not None:
            await _answer(send, *refusal)
            return
        path = scope["path"]
        if path == hello.PATH:
            await self._hello(scope, send)
            return
        if is_ui(path):
            # Pages and the login: no credential needed; the session's principal if any.
            await self._ui_session(scope, headers)
            if _reserved(scope) and not _is_admin(scope.get("state", {}).get("principal")):
                await _answer(send, 503, "unavailable", reserve_refusal(_reserved(scope)))
                return
        elif path not in self._public:
            if peer is not None:
                principal = await self._local(peer, send)
            elif b"authorization" not in headers and self._session_id(headers):
                principal = await self._by_session(scope, headers, send)
            else:
                principal = await self._authenticate(scope, headers, send)
            if principal is None:
                return
            if not await self._admit_connection(scope, principal, send):
                return
            if (
                not principal.may_change
                and scope["method"] not in _READS
                and path not in READ_SCOPE_POSTS
            ):
                await _answer(send, 403, Forbidden.code, _READ_ONLY)
                return
            scope.setdefault("state", {})["principal"] = principal
        length = headers.get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self._max):
            await _answer(send, 413, PayloadTooLarge.code, self._too_large())
            return
        await self._app(scope, self._bounded(receive), send)

    def _refusal(
        self, scope: Scope, headers: dict[bytes, bytes], *, local: bool = False
    ) -> tuple[int, str, str] | None:
        """421 for a Host that is not this server's (not asked of a `local` caller, on the
        Unix socket), 403 for a cross-site state change."""
        hosts = self._access.hosts
        host = headers.get(b"host", b"")
        if not local and not hosts.allows(host):
            return 421, "misdirected_request", hosts.refusal(host)
        origin = headers.get(b"origin")
        if (
            origin is not None
            and scope["method"] not in _SAFE_METHODS
            and not hosts.allows_origin(origin)
        ):
            shown = origin.decode("latin-1")[:100]
            message = (
                f"a {scope['method']} from the web page at {shown!r} (another site) is refused "
                "(CSRF): use the CLI or the SDK, or open the page from this server's own address"
            )
            return 403, Forbidden.code, message
        return None

    async def _authenticate(
        self, scope: Scope, headers: dict[bytes, bytes], send: Send
    ) -> Principal | None:
        """The principal, or None once a 401/429 is sent. A failure is charged to the
        credential presented (never the address: every local client is 127.0.0.1), and a
        valid one is never refused for anyone's failures."""
        authorization = headers.get(b"authorization", b"")
        if (
            self._metrics_header is not None
            and scope["path"] == "/metrics"
            and scope["method"] == "GET"
            and hmac.compare_digest(authorization, self._metrics_header)
        ):
            return METRICS_PRINCIPAL
        try:
            return self._auth.authenticate(authorization)
        except Unauthorized as exc:
            # No credential at all is nobody's: those failures count per address.
            secret = authorization.partition(b" ")[2].strip(b" ")
            key = failure_key("bearer", secret) if secret else f"none:{_address(scope)}"
            if not await self._throttled(key, send, exc.message):
                self._access.throttle.failed(key)
                await _answer(send, 401, exc.code, exc.message, {"WWW-Authenticate": "Bearer"})
            return None

    async def _admit_connection(self, scope: Scope, principal: Principal, send: Send) -> bool:
        """Whether the connection may carry `principal`'s request: a connection of the
        reserve only an admin's; any other counts once for its account, up to the cap (429
        sent, and the connection closed, past it)."""
        connection = (scope.get("extensions") or {}).get(CONNECTION)
        if connection is None or principal.is_admin:
            return True  # not from the HTTP server (in-process tests), or an admin: uncounted
        if connection.get("reserve"):
            await _answer(send, 503, "unavailable", reserve_refusal(connection["reserve"]))
            return False
        if connection.get("user") == principal.user:
            return True  # counted at its first request
        caps = self._access.connections
        release = caps.hold(principal.user)
        if release is None:
            await _answer(send, 429, "rate_limited", caps.refusal(principal.user))
            return False
        earlier = connection.get("release")
        if callable(earlier):
            earlier()  # a keep-alive connection another account used before
        connection["user"], connection["release"] = principal.user, release
        return True

    async def _local(self, uid: int, send: Send) -> Principal | None:
        """The principal of a caller on the Unix socket, by the uid the kernel gave; None
        once a 401/403 is sent. A first request may register the user (a store write: off
        the event loop)."""
        if self._peers is None:
            message = "this server takes no callers on a Unix socket: use its URL and a token"
            await _answer(send, 401, Unauthorized.code, message)
            return None
        key = f"uid:{uid}"  # the peer's own failures only: nobody else's count here
        refused = f"this server refused uid {uid} (no account, or a disabled one)"
        if await self._throttled(key, send, refused):
            return None  # before looking its name up again
        try:
            principal = self._peers.lookup(uid)
            if principal is None:
                principal = await asyncio.to_thread(self._peers.register, uid)
        except (Unauthorized, Forbidden) as exc:
            self._access.throttle.failed(key)
            status = 401 if isinstance(exc, Unauthorized) else 403
            await _answer(send, status, exc.code, exc.message)
            return None
        return principal

    def _session_id(self, headers: dict[bytes, bytes]) -> str | None:
        if self._sessions is None:
            return None
        return cookie_value(headers.get(b"cookie", b""), self._cookie)

    async def _session_principal(self, session: Session) -> Principal:
        """The principal of a live session, asked again of the credential it came from;
        Unauthorized/Forbidden when that no longer admits anyone."""
        origin = session.origin
        if origin.token_hash is not None:
            return self._auth.authenticate_hash(origin.token_hash)
        if origin.uid is not None and self._peers is not None:
            principal = self._peers.lookup(origin.uid)
            if principal is None:
                principal = await asyncio.to_thread(self._peers.register, origin.uid)
            return principal
        return origin.principal

    async def _by_session(
        self, scope: Scope, headers: dict[bytes, bytes], send: Send
    ) -> Principal | None:
        """The principal of a session (its cookie and its page's key), or None once a
        401/403 is sent."""
        assert self._sessions is not None
        session_id = self._session_id(headers) or ""
        session = self._sessions.lookup(session_id)
        if session is None:
            # Not charged to the throttle: nobody guesses a 256-bit id, and every dashboard
            # open when the server restarted comes back with a stale cookie at once.
            why = "it expired, you logged out or the server restarted"
            await _answer(send, 401, Unauthorized.code, _SESSION_ENDED.format(why=why))
            return None
        # The cookie reaches every port of this host; the key only the dashboard's origin.
        if not self._sessions.key_matches(session, headers.get(KEY_HEADER)):
            await _answer(send, 401, Unauthorized.code, _NO_KEY)
            return None
        site = headers.get(b"sec-fetch-site", b"same-origin")
        if site != b"same-origin":  # a browser says another page sent it
            shown = site.decode("latin-1")[:20]
            await _answer(send, 403, Forbidden.code, _OTHER_PAGE.format(site=shown))
            return None
        try:
            principal = await self._session_principal(session)
        except (Unauthorized, Forbidden) as exc:
            self._sessions.forget(session_id)
            await _answer(send, 401, Unauthorized.code, _SESSION_ENDED.format(why=exc.message))
            return None
        state = scope.setdefault("state", {})
        state[ORIGIN] = session.origin
        state[WEB_SESSION] = (session_id, session)
        return principal

    async def _ui_session(self, scope: Scope, headers: dict[bytes, bytes]) -> None:
        """A dashboard page's session, when its cookie names a live one (nothing sent): the
        shell is served over the login then; its principal only with the page's key."""
        session_id = self._session_id(headers)
        if not session_id or self._sessions is None:
            return
        session = self._sessions.lookup(session_id)
        if session is None:
            return
        try:
            principal = await self._session_principal(session)
        except (Unauthorized, Forbidden):
            self._sessions.forget(session_id)
            return
        state = scope.setdefault("state", {})
        state[WEB_SESSION] = (session_id, session)
        if self._sessions.key_matches(session, headers.get(KEY_HEADER)):
            state["principal"] = principal
            state[ORIGIN] = session.origin

    async def _throttled(self, key: str, send: Send, why: str) -> bool:
        """Whether the credential `key` must wait (429 sent, saying `why` it failed): it
        failed to authenticate too often."""
        wait_s = self._access.throttle.retry_after_s(key)
        if wait_s:
            await _answer(send, 429, "rate_limited", throttled_message(why, wait_s),
                          {"Retry-After": str(wait_s)})  # fmt: skip
        return wait_s > 0

    async def _hello(self, scope: Scope, send: Send) -> None:
        """`GET /api/v1/hello?nonce=HEX&key=ID`: prove this server knows the token `key` names,
        before the client sends it (domain/hello.py); no token needed, none revealed."""
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        nonce, key_id = query.get("nonce", [""])[0], query.get("key", [""])[0]
        try:
            raw = bytes.fromhex(nonce)
        except ValueError:
            raw = b""
        if scope["method"] != "GET" or not 16 <= len(raw) <= 64:
            message = "hello needs GET with nonce=HEX (16-64 random bytes) and key=ID"
            await _answer(send, 422, "invalid_request", message)
            return
        key = self._auth.hello_key(key_id)
        if key is None:
            message = (
                "missing or wrong API token: this server holds no such token (the CLI reads "
                "it from GPUYARD_TOKEN, `gpuyard login`'s file or the server's state dir)"
            )
            failed = failure_key("hello", key_id)
            if not await self._throttled(failed, send, message):
                self._access.throttle.failed(failed)  # a way to test guessed tokens, too
                await _answer(send, 401, Unauthorized.code, message)
            return
        body = json.dumps({"proof": hello.proof(key, raw)}).encode()
        await send({"type": "http.response.start", "status": 200, "headers": [
            (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
        ]})  # fmt: skip
        await send({"type": "http.response.body", "body": body})

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


# POSTs a read-scope credential may make: they change nothing of the account's (a login link
# makes a session with the same read scope).
READ_SCOPE_POSTS = frozenset({"/api/v1/web/login-link"})


def throttled_message(why: str, wait_s: int) -> str:
    """The 429 of a credential that failed too often: what is wrong with it, and the wait."""
    return (
        f"{why.rstrip('.')} (this credential failed too often: wait {wait_s} s before "
        "trying it again)"
    )


def cookie_value(header: bytes, name: str) -> str | None:
    """One cookie's value from a Cookie header (the first of that name), or None."""
    wanted = name.encode() + b"="
    for part in header.split(b";"):
        part = part.strip()
        if part.startswith(wanted):
            return part[len(wanted) :].decode("latin-1")
    return None


def request_origin(scope: Scope, principal: Principal) -> Origin:
    """How an authenticated request's principal was established, for a web session made
    from it (the login link): its web session's origin (bound to end with that session),
    its socket peer's uid, or its bearer token's hash. Worked out only when asked (not a hash
    more per request)."""
    state = scope.get("state", {})
    if WEB_SESSION in state:
        return WebSessions.bound_to(state[WEB_SESSION][1])
    if ORIGIN in state:
        found: Origin = state[ORIGIN]
        return found
    peer = _peer_uid(scope)
    if peer is not None:
        return Origin(principal, uid=peer)
    headers = dict(scope["headers"])
    scheme, _, secret = headers.get(b"authorization", b"").partition(b" ")
    if scheme.lower() == b"bearer" and secret.strip(b" "):
        return Origin(principal, token_hash=token_hash(secret.strip(b" ")))
    return Origin(principal)


def _reserved(scope: Scope) -> int:
    """How many connections were open when this one came, if it is one of the reserve's."""
    connection = (scope.get("extensions") or {}).get(CONNECTION) or {}
    return int(connection.get("reserve") or 0)


def _is_admin(principal: object) -> bool:
    return isinstance(principal, Principal) and principal.is_admin


def _peer_uid(scope: Scope) -> int | None:
    """The uid the kernel gave for a Unix socket caller; None for TCP."""
    peer = (scope.get("extensions") or {}).get(PEER)
    return int(peer["uid"]) if peer else None


def _address(scope: Scope) -> str:
    client = scope.get("client")
    return str(client[0]) if client else "?"


async def _answer(
    send: Send, status: int, code: str, message: str, extra: dict[str, str] | None = None
) -> None:
    body = json.dumps(error_body(code, message)).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    headers += [(k.lower().encode(), v.encode()) for k, v in (extra or {}).items()]
    # The body was not read: the connection cannot be reused for a next request.
    headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
