"""The client's connection trust: which server, which token, and the proof before it is sent.

Apart from the SDK (`gpuyard.client`, one method per route) as httpx keeps its transports
apart: a request goes to a root server's Unix socket when there is one (the kernel tells the
server who this is: no token), else over HTTP(S) with the token found for that server, sent
only on a connection whose server has proved it holds it (`gpuyard.domain.hello`). Like the
client it is on the CLI's start path: no `typing`, no `urllib`.
"""

from __future__ import annotations

import json
import os
import socket

from gpuyard._http import HttpResponse, UntrustedSocket, request
from gpuyard.domain import hello
from gpuyard.domain.errors import ERRORS_BY_CODE, GpuyardError, Unauthorized
from gpuyard.locations import (
    DEFAULT_URL,
    TOKEN_FILE,
    config_dir_path,
    login_url,
    socket_path,
    state_dir_path,
)

TYPE_CHECKING = False  # `typing` only for the type checker (~3 ms on the CLI's path)
if TYPE_CHECKING:
    from gpuyard._http import Exchange


class ServerUnreachable(GpuyardError):
    """No gpuyard server answers at the URL."""

    code = "unreachable"
    # Whether the request may have reached the server (the connection failed after it was
    # sent); False when it was certainly not (nobody listening).
    maybe_sent = True


class ServerNotVerified(GpuyardError):
    """What listens at the URL could not prove it holds the token: the token was not sent."""

    code = "unverified_server"


class Connection:
    """One server's address and token; `send` makes one request on a connection of its own."""

    def __init__(self, url: str | None, token: str | None, timeout_s: float) -> None:
        given = url or os.environ.get("GPUYARD_URL") or login_url()
        # A root server's Unix socket (`unix:PATH`, or found where GPUYARD_SOCKET or the
        # default says): the kernel tells the server who this is, so no token is sent.
        # Without a URL it is preferred when it exists; one nobody listens on is skipped.
        self._socket: str | None = None
        self._socket_only = given is not None and given.startswith("unix:")
        if self._socket_only:
            assert given is not None
            self._socket = "/" + given[5:].lstrip("/")
            given = None
        # Where a socket is looked for again before each request while none answers (a
        # restarting server removes its socket, then makes it again): None, one was named.
        self._socket_search: str | None = None
        if not self._socket_only and given is None:
            self._socket_search = socket_path()
            self._socket = _existing_socket(self._socket_search)
        self._tcp_url = (given or DEFAULT_URL).rstrip("/")
        self.url = f"unix:{self._socket}" if self._socket else self._tcp_url
        self._https, self._host, self._port = split_url(self._tcp_url)
        # Where the token came from, for a 401's message; None: the caller gave it.
        self._token_source: str | None = None
        if token is None:
            token, self._token_source = _find_token(self.url)
        self.token = token
        self._timeout_s = timeout_s

    def send(
        self, method: str, path: str, headers: dict[str, str], payload: bytes | None,
        timeout_s: float | None,
    ) -> HttpResponse:  # fmt: skip
        """The request, over the socket if there is one, else with the token once the server
        proved itself; a 4xx or 5xx raised as the server's error (`timeout_s` -1: the
        client's own)."""
        if self._socket is None and self._socket_search is not None:
            self._socket = _existing_socket(self._socket_search)
            if self._socket is not None:
                self.url = f"unix:{self._socket}"
        if self._socket is not None:
            resp = self._over_socket(self._socket, method, path, headers, payload, timeout_s)
            if resp is not None:
                return resp
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        try:
            resp = request(
                self._host, self._port, method, path, headers, payload,
                timeout_s=self._timeout_s if timeout_s == -1.0 else timeout_s, tls=self._https,
                before=self._verify_server if self.token else None,
            )  # fmt: skip
        except OSError as exc:
            raise self.unreachable(exc) from None
        if resp.status >= 400:
            error = error_from(resp)
            if isinstance(error, Unauthorized) and self._token_source is not None:
                raise _unauthorized(self.token, self._token_source, error.message)
            raise error
        return resp

    def _over_socket(
        self, path: str, method: str, path_qs: str, headers: dict[str, str],
        payload: bytes | None, timeout_s: float | None,
    ) -> HttpResponse | None:  # fmt: skip
        """The request on the Unix socket, without a token; None when nobody listens there
        and the socket was only found, not asked for (the server's URL is used instead)."""
        try:
            resp = request(
                "localhost", 0, method, path_qs, headers, payload,
                timeout_s=self._timeout_s if timeout_s == -1.0 else timeout_s, unix=path,
            )  # fmt: skip
        except UntrustedSocket as exc:
            raise ServerNotVerified(str(exc)) from None
        except (FileNotFoundError, ConnectionRefusedError, PermissionError) as exc:  # nobody
            if self._socket_only:
                raise self.unreachable(exc) from None
            self._socket, self.url = None, self._tcp_url
            return None
        except OSError as exc:
            raise self.unreachable(exc) from None
        if resp.status >= 400:
            raise error_from(resp)
        return resp

    def unreachable(self, cause: OSError | None = None) -> ServerUnreachable:
        error = ServerUnreachable(
            f"cannot reach gpuyard server at {self.url}: is `gpuyard server` running?"
        )
        # Nobody listening, or no such socket or host: the request never left.
        error.maybe_sent = not isinstance(
            cause, (ConnectionRefusedError, FileNotFoundError, socket.gaierror)
        )
        return error

    def _verify_server(self, exchange: Exchange) -> None:
        """Before the token leaves this process, on the connection it will be sent on: the
        server answers a fresh nonce with an HMAC keyed by the token's hash
        (`gpuyard.domain.hello`), which only a server holding the token can compute. Bound to
        the connection, not remembered: a server restarted between two requests (when another
        program could take its port) proves itself again; it costs one round trip."""
        assert self.token is not None
        key = hello.token_key(self.token)
        nonce = os.urandom(32)
        path = f"{hello.PATH}?nonce={nonce.hex()}&key={hello.key_id(key)}"
        resp = exchange("GET", path, {"Accept": "application/json"})
        if int(resp.headers.get("content-length") or 0) > 4096:
            raise self._not_verified(resp.status)  # not our server's answer: do not read it
        raw = resp.read()
        if resp.status == 200:
            try:
                answer = json.loads(raw)["proof"]
            except (ValueError, KeyError, TypeError):
                answer = ""
            if isinstance(answer, str) and hello.check(key, nonce, answer):
                return
        elif resp.status in (401, 429):
            error = error_from_body(resp, raw)
            if isinstance(error, Unauthorized) and self._token_source is not None:
                raise _unauthorized(self.token, self._token_source, error.message)
            raise error
        raise self._not_verified(resp.status)

    def _not_verified(self, status: int) -> ServerNotVerified:
        return ServerNotVerified(
            f"what listens at {self.url} could not prove it is the gpuyard server holding "
            f"your token (HTTP {status}), so the token was not sent: another program may "
            "have taken the port; check `gpuyard server` is running there"
        )


def find_token(url: str | None = None) -> str | None:
    """GPUYARD_TOKEN, else `gpuyard login`'s token (for its server), else the token file in
    the local server's state dir."""
    return _find_token(url)[0]


def login_token_path() -> str:
    """Where `gpuyard login` keeps its token (0600)."""
    return os.path.join(config_dir_path(), TOKEN_FILE)


def _find_token(url: str | None = None) -> tuple[str | None, str]:
    """The token and where it came from (`GPUYARD_TOKEN` or the file tried), so a 401 can say
    which token was refused or which file was missing. `gpuyard login`'s token is sent only to
    the server it was given for (`url`), never to another one the client is pointed at."""
    token = os.environ.get("GPUYARD_TOKEN")
    if token:
        return token.strip(), "GPUYARD_TOKEN"
    logged_in = login_url()
    if logged_in is not None and (url is None or _same_server(url, logged_in)):
        path = login_token_path()
        try:
            with open(path) as f:
                return f.read().strip(), path
        except OSError:
            pass
    path = os.path.join(state_dir_path(), TOKEN_FILE)
    try:
        with open(path) as f:
            return f.read().strip(), path
    except OSError:
        return None, path


def _same_server(url: str, other: str) -> bool:
    try:
        return split_url(url) == split_url(other)
    except GpuyardError:
        return False


def _unauthorized(token: str | None, source: str, said: str = "") -> Unauthorized:
    """A 401 in one line naming the token's source and what to do (`said`: the server's
    reason, when it is more than "unknown": expired, revoked, account disabled)."""
    fix = "set GPUYARD_STATE_DIR to the server's --state-dir, or GPUYARD_TOKEN to its token"
    if said and not said.startswith("missing or wrong"):
        return Unauthorized(f"{said} (the token in {source})")
    if source == login_token_path():
        return Unauthorized(
            f"the server refused the API token in {source} (`gpuyard login`'s): make a new "
            "one (`gpuyard token create`) and run `gpuyard login URL` again"
        )
    if source == "GPUYARD_TOKEN":
        return Unauthorized(
            "the server refused the API token in GPUYARD_TOKEN: set it to the one in the "
            "server's state dir (its `token` file), or unset it"
        )
    if token is None:
        return Unauthorized(f"no API token: {source} does not exist: {fix}")
    return Unauthorized(f"the server refused the API token in {source} (another server's?): {fix}")


def _existing_socket(path: str | None) -> str | None:
    """`path` if a socket is there (one stat: the CLI's start path pays ~2 us for it)."""
    if path is None:
        return None
    try:
        return path if os.stat(path).st_mode & 0o170000 == 0o140000 else None  # S_ISSOCK
    except OSError:
        return None


def split_url(url: str) -> tuple[bool, str, int]:
    """`http[s]://HOST[:PORT][/...]` -> (https, host, port); HOST may be `[v6 address]`.

    By hand: `urllib.parse` costs the CLI ~3 ms to import, for this one split.
    """
    bad = GpuyardError(f"bad server URL {url!r}: use http://HOST:PORT")
    scheme, sep, rest = url.partition("://")
    scheme = scheme.lower()
    if not sep or scheme not in ("http", "https"):
        raise bad
    netloc = rest.split("/", 1)[0].rpartition("@")[2]
    if netloc.startswith("["):
        host, _, after = netloc[1:].partition("]")
        if after and not after.startswith(":"):
            raise bad
        port_text = after[1:]
    else:
        host, _, port_text = netloc.partition(":")
    if not host or (port_text and not (port_text.isdigit() and 0 < int(port_text) < 65536)):
        raise bad
    https = scheme == "https"
    return https, host.lower(), int(port_text) if port_text else 443 if https else 80


def error_from(resp: HttpResponse) -> GpuyardError:
    """The server's error answer as its exception class (`domain.errors`)."""
    return error_from_body(resp, resp.read())


def error_from_body(resp: HttpResponse, raw: bytes) -> GpuyardError:
    """The error, with `retry_after_s` set when a 503 or 429 says when to send it again
    (`gpuyard._retry` waits that long and sends it again)."""
    try:
        err = json.loads(raw)["error"]
        cls = ERRORS_BY_CODE.get(err["code"], GpuyardError)
        error = cls(err["message"], field=err.get("field"))
    except (ValueError, KeyError, TypeError):
        text = raw.decode(errors="replace").strip()[:200]
        error = GpuyardError(f"server answered HTTP {resp.status}: {text or resp.reason}")
    if resp.status in (429, 503):
        error.retry_after_s = _retry_after(resp.headers.get("retry-after", ""))
    return error


def _retry_after(value: str) -> float | None:
    """Retry-After in seconds (its HTTP-date form, which gpuyard never sends: None)."""
    try:
        return max(0.0, float(value))
    except ValueError:
        return None
