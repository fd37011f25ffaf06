"""/ui: the web dashboard's routes: its files, the login and the session, the app shell.

Its pages and static files ship inside the package (`gpuyard/web/static/`, no build at install;
`api/static_files.py`); every page path serves the app shell (`index.html`, client-side
routing) to a logged-in browser and sends anyone else to the login.

Login: `POST /ui/login` with an API token, or with a one-time code from `gpuyard dashboard`
(`POST /api/v1/web/login-link`, made by whoever the CLI is: its token or its Unix-socket
identity), makes a server-side session (`services/access/web_sessions.py`, the server's
`web_sessions`): its id in the HttpOnly cookie `gpuyard_session_PORT`, and its page key handed
to the page alone (a form login's redirect carries it in the URL's fragment, `#key=`, which no
server sees; a JSON login in its body), which the page keeps in its origin's storage and sends
in `X-Session-Key` with every request. The server's root account may not log in unless the
admin allows it (`allow_root_dashboard`). Every answer here carries the strict
Content-Security-Policy of `api/static_files.py`.
"""

from __future__ import annotations

import json
from typing import Annotated, Any
from urllib.parse import parse_qs, quote

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import RedirectResponse

from gpuyard.api.deps import Actor, Server
from gpuyard.api.errors import error_body
from gpuyard.api.front_door import (
    KEY_HEADER,
    PEER,
    WEB_SESSION,
    request_origin,
    session_cookie,
    throttled_message,
)
from gpuyard.api.login_page import login_form
from gpuyard.api.static_files import (
    SECURITY_HEADERS,
    dashboard_files,
    json_bytes,
    page_response,
    serve_file,
)
from gpuyard.domain.errors import Forbidden, Unauthorized
from gpuyard.domain.principal import Principal
from gpuyard.schemas.web_v1 import LoginLinkOut, LoginOut, SessionOut
from gpuyard.services.access.front import failure_key
from gpuyard.services.access.tokens import token_hash
from gpuyard.services.access.web_sessions import NewSession, Origin, Session, WebSessions
from gpuyard.services.server import ServerFacade

router = APIRouter(prefix="/ui", include_in_schema=False)
api_router = APIRouter(prefix="/api/v1/web", tags=["web"])


def _sessions(request: Request) -> WebSessions:
    server: ServerFacade = request.app.state.server
    return server.web_sessions


def _session(request: Request) -> tuple[str, Session] | None:
    found: tuple[str, Session] | None = request.scope.get("state", {}).get(WEB_SESSION)
    return found


@router.get("/static/{path:path}")
async def static_file(path: str, request: Request) -> Response:
    """A file of the dashboard's: revalidated by ETag, or cached for good when asked for by
    its hash (`?v=` the ETag's value)."""
    return serve_file(request, path)


# ----------------------------------------------------------------------------- login


def _safe_next(value: str | None) -> str:
    """Where to go after the login: a dashboard path of this server only (no open redirect)."""
    if value and value.startswith("/ui/") and "//" not in value and "\\" not in value:
        return value
    return "/ui/"


@router.get("/login")
async def login_page(
    request: Request,
    code: Annotated[str, Query(max_length=128)] = "",
    next: Annotated[str, Query(max_length=2048)] = "/ui/",
) -> Response:
    """The login form: the app shell's (its login page posts the token here), or this
    module's own when the shell is not installed. `?code=` (from `gpuyard dashboard`) asks
    only for a click: the code is used by the POST, so a link opened by a mail scanner or a
    preview logs nobody in."""
    if not code:
        shell = dashboard_files(request).get("index.html")
        if shell is not None:
            return page_response(shell.body)
        return login_form(request, next_path=_safe_next(next))
    user = _sessions(request).peek(code)
    if user is None:
        return login_form(request, next_path=_safe_next(next), status=401, error=_CODE_GONE)
    return login_form(request, code=code, user=user, next_path=_safe_next(next))


_CODE_GONE = (
    "this login link was used already or is more than a minute old: run `gpuyard dashboard` "
    "again, or log in with a token"
)
_BAD_TOKEN = (
    "missing or wrong API token: paste a token from `gpuyard token create` (or run `gpuyard "
    "dashboard` on the server's machine)"
)


async def _login_fields(request: Request) -> dict[str, str]:
    body = await request.body()
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind == "application/json":
        try:
            data = json.loads(body or b"{}")
        except ValueError:
            data = {}
        return (
            {k: str(v) for k, v in data.items() if isinstance(v, str)}
            if isinstance(data, dict)
            else {}
        )
    parsed = parse_qs(body.decode("utf-8", "replace"), max_num_fields=8)
    return {k: v[0] for k, v in parsed.items() if v}


@router.post("/login")
async def login(request: Request, server: Server) -> Response:
    """Make a session from a token or a one-time code. A form gets a redirect (303) to the
    page it came for, the page key in its fragment; JSON gets `LoginOut`; both the cookie."""
    fields = await _login_fields(request)
    wants_json = "application/json" in request.headers.get("content-type", "")
    next_path = _safe_next(fields.get("next"))
    sessions = _sessions(request)
    throttle = server.access.throttle
    origin: Origin | None
    if fields.get("code"):
        origin = sessions.redeem(fields["code"])
        failure, key = _CODE_GONE, failure_key("code", fields["code"])
    else:
        token = fields.get("token", "").strip()
        origin, failure = _token_origin(server, token), _BAD_TOKEN
        key = failure_key("bearer", token)
    if origin is None:
        # Charged to the credential tried, never the address (every local browser is
        # 127.0.0.1): a valid token or code is never refused for someone else's failures.
        wait_s = throttle.retry_after_s(key)
        if wait_s:
            message = throttled_message(failure, wait_s)
            return _refused(request, wants_json, 429, "rate_limited", message, next_path)
        throttle.failed(key)
        return _refused(request, wants_json, 401, Unauthorized.code, failure, next_path)
    try:
        made = sessions.login(origin)
    except Forbidden as exc:  # root, by default
        return _refused(request, wants_json, 403, exc.code, exc.message, next_path)
    if wants_json:
        who = _session_out(made.principal)
        answer: Response = Response(
            LoginOut(**who.model_dump(), key=made.key).model_dump_json(),
            media_type="application/json",
            headers={**SECURITY_HEADERS, "Cache-Control": "no-store"},
        )
    else:
        where = f"{next_path.split('#')[0]}#key={made.key}"  # a fragment: never sent anywhere
        answer = RedirectResponse(where, status_code=303, headers=SECURITY_HEADERS)
    _set_cookies(request, answer, made)
    return answer


def _token_origin(server: Any, token: str) -> Origin | None:
    token = token.strip()
    if not token:
        return None
    hashed = token_hash(token)
    try:
        principal = server.auth.authenticate_hash(hashed)
    except Unauthorized:
        return None
    return Origin(principal, token_hash=hashed)


def _refused(
    request: Request, wants_json: bool, status: int, code: str, message: str, next_path: str
) -> Response:
    if wants_json:
        return Response(
            json_bytes(error_body(code, message)),
            status_code=status,
            media_type="application/json",
            headers=SECURITY_HEADERS,
        )
    if dashboard_files(request).get("index.html") is not None:  # its login page shows `error`
        where = f"/ui/login?error={quote(message)}&next={quote(next_path)}"
        return RedirectResponse(where, status_code=303, headers=SECURITY_HEADERS)
    return login_form(request, next_path=next_path, error=message, status=status)


def _secure(request: Request) -> bool:
    """Served over https (directly, or by a reverse proxy that says so): cookies only over
    https then."""
    return (
        request.url.scheme == "https"
        or request.headers.get("x-forwarded-proto", "").lower() == "https"
    )


def _cookie_name(request: Request) -> str:
    server: ServerFacade = request.app.state.server
    return session_cookie(server.access.hosts.port)


def _set_cookies(request: Request, response: Response, made: NewSession) -> None:
    """The session id's cookie: HttpOnly, SameSite=Strict, and only half the credential
    (every port of this host gets it; the page's key is the other half)."""
    response.set_cookie(
        _cookie_name(request), made.session_id, max_age=made.max_age_s, path="/",
        secure=_secure(request), httponly=True, samesite="strict",
    )  # fmt: skip


def _session_out(principal: Principal) -> SessionOut:
    return SessionOut(
        user=principal.user, role=principal.role, team=principal.team, scope=principal.scope,
    )  # fmt: skip


@router.get("/session")
async def session_info(request: Request) -> Response:
    """Who the page's session is (its cookie and its key); 401 without one."""
    found = _session(request)
    principal = request.scope.get("state", {}).get("principal")
    if found is None or not isinstance(principal, Principal):
        message = "no dashboard session with this page's key: log in at /ui/login"
        return Response(
            json_bytes(error_body(Unauthorized.code, message)),
            status_code=401,
            media_type="application/json",
            headers={**SECURITY_HEADERS, "Cache-Control": "no-store"},
        )
    body = _session_out(principal).model_dump_json()
    return Response(
        body,
        media_type="application/json",
        headers={**SECURITY_HEADERS, "Cache-Control": "no-store"},
    )


@router.post("/logout")
async def logout(request: Request) -> Response:
    """End the session (the page's key required: the header, or a form's `key` field)."""
    found = _session(request)
    if found is not None:
        sent = request.headers.get(KEY_HEADER.decode())
        if sent is None:
            sent = (await _login_fields(request)).get("key")
        if not WebSessions.key_matches(found[1], sent.encode() if sent else None):
            return Response(
                json_bytes(error_body("forbidden", _BAD_LOGOUT)),
                status_code=403,
                media_type="application/json",
                headers=SECURITY_HEADERS,
            )
        _sessions(request).logout(found[0])
    answer = RedirectResponse("/ui/login", status_code=303, headers=SECURITY_HEADERS)
    secure = _secure(request)
    answer.delete_cookie(_cookie_name(request), path="/", secure=secure, samesite="strict")
    return answer


_BAD_LOGOUT = "missing or wrong X-Session-Key header (or key form field): reload the page"


# ----------------------------------------------------------------------------- login link


@api_router.post("/login-link")
async def login_link(request: Request, actor: Actor, server: Server) -> LoginLinkOut:
    """A one-time link (valid a minute, used once) that logs a browser in as the caller, with
    the caller's scope: what `gpuyard dashboard` prints on the server's machine, where the CLI
    needs no token (its Unix-socket identity)."""
    sessions = _sessions(request)
    code = sessions.new_code(request_origin(request.scope, actor))
    path = f"/ui/login?code={quote(code)}"
    return LoginLinkOut(
        path=path,
        url=_base_url(request, server) + path,
        expires_in_s=int(sessions.code_ttl_s),
        user=actor.user,
    )


def _base_url(request: Request, server: Any) -> str:
    """This server's address: as a TCP request named it (its Host was checked), else (a
    caller on the Unix socket) the address it listens on, a name with a port first."""
    if PEER not in (request.scope.get("extensions") or {}):
        scheme = "https" if _secure(request) else "http"
        return f"{scheme}://{request.headers.get('host', '')}"
    names = server.access.hosts.names
    with_port = [n for n in names if n.rpartition(":")[2].isdigit() and not n.endswith("]")]
    return f"http://{(with_port or names or ['127.0.0.1'])[0]}"


# ----------------------------------------------------------------------------- pages


_NO_SHELL = """<!doctype html><html lang="en"><head><meta charset="utf-8">
<title>gpuyard</title></head><body><p>The dashboard's pages are not installed with this
server (no index.html in gpuyard/web/static). The API is at /api/v1 and /docs.</p>
<form method="post" action="/ui/logout"><button>Log out</button></form></body></html>
"""


@router.get("")
async def ui_root() -> Response:
    return RedirectResponse("/ui/", status_code=308, headers=SECURITY_HEADERS)


@router.get("/")
async def shell_root(request: Request) -> Response:
    return _shell(request)


@router.get("/{page:path}")
async def shell(page: str, request: Request) -> Response:
    """Every page path (/ui/jobs/7, /ui/gpus, ...) is the app shell: the page's script
    routes; a browser without a session goes to the login first."""
    return _shell(request)


def _shell(request: Request) -> Response:
    if _session(request) is None:
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        where = "/ui/login" + (f"?next={quote(target)}" if target != "/ui/" else "")
        return RedirectResponse(where, status_code=303, headers=SECURITY_HEADERS)
    asset = dashboard_files(request).get("index.html")
    if asset is None:
        return page_response(_NO_SHELL)
    headers = {**SECURITY_HEADERS, "Cache-Control": "no-store"}
    return Response(asset.body, media_type=asset.media_type, headers=headers)
