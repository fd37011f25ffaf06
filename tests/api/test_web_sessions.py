"""The web dashboard's server side in-process (the real app over a real SQLite store): login
with a token or a one-time link, the session (its cookie and the page's key) as the API's
credential, foreign Origins, what a session may see and make, root's login, the static files
and their security headers."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from fastapi.testclient import TestClient

from gpuyard.bootstrap import build_app
from gpuyard.domain.errors import GpuyardError
from gpuyard.domain.principal import Principal
from gpuyard.services.server import ServerFacade
from gpuyard.settings import Settings

OWNER, OTHER = "nobody", "daemon"  # Unix users every Linux has (root runs jobs as them)


@dataclass
class Web:
    server: ServerFacade
    settings: Settings
    admin_token: str
    tokens: dict[str, str]

    def browser(self) -> TestClient:
        """A fresh browser (its own cookie jar) on the server's own address."""
        client = TestClient(self.app, base_url=self.settings.url, follow_redirects=False)
        return client

    @property
    def cookie(self) -> str:
        return f"gpuyard_session_{self.settings.port}"

    app: object = None


@pytest.fixture
def web() -> Iterator[Web]:
    # A state dir its jobs' users may reach (pytest's tmp is root's alone: a root server
    # refuses to run jobs as others there).
    place = Path(tempfile.mkdtemp(prefix="gyweb-"))
    place.chmod(0o711)
    try:
        yield from _web(place)
    finally:
        shutil.rmtree(place, ignore_errors=True)


def _web(place: Path) -> Iterator[Web]:
    settings = Settings(state_dir=place / "state", gpus="0", cpus=2, kill_grace_s=1)
    server, app = build_app(settings)
    admin_token = settings.token_path.read_text().strip()
    with TestClient(app, base_url=settings.url) as admin:
        admin.headers["Authorization"] = f"Bearer {admin_token}"
        tokens = {}
        for name in (OWNER, OTHER):
            assert admin.post("/api/v1/admin/users", json={"name": name}).status_code == 201
            assert server.accounts is not None
            secret, _ = server.accounts.create_token(Principal(name, "user", None, "submit"))
            tokens[name] = secret
        rig = Web(server, settings, admin_token, tokens, app)
        yield rig
        for job in server.reads.list_jobs(server.auth.principal, include_finished=False):
            with contextlib.suppress(GpuyardError):
                server.verbs.cancel(job.id, server.auth.principal)


def _login(browser: TestClient, token: str, path: str = "/ui/") -> str:
    """Log in as the page does; the page's key (from the redirect's fragment), which the
    browser then sends with every request, as the dashboard's script does."""
    answer = browser.post("/ui/login", data={"token": token})
    assert answer.status_code == 303, answer.text
    return _keep_key(browser, answer, path)


def _keep_key(browser: TestClient | httpx.Client, answer: httpx.Response, path: str) -> str:
    where = urlsplit(answer.headers["location"])
    assert where.path == path and where.fragment.startswith("key="), where
    key = where.fragment.removeprefix("key=")
    browser.headers["X-Session-Key"] = key
    return key


def _login_refusal(answer: object) -> str:
    """Why a form login was refused: shown on the shell's login page (a redirect with
    `error`), or on the server's own form (401) when the shell is not installed."""
    status = answer.status_code  # type: ignore[attr-defined]
    if status == 303:
        query = parse_qs(urlsplit(answer.headers["location"]).query)  # type: ignore[attr-defined]
        assert urlsplit(answer.headers["location"]).path == "/ui/login"  # type: ignore[attr-defined]
        return query["error"][0]
    assert status == 401
    return str(answer.text)  # type: ignore[attr-defined]


def _one_line_error(answer: object) -> str:
    body = answer.json()  # type: ignore[attr-defined]
    message = body["error"]["message"]
    assert "\n" not in message
    return str(message)


def test_a_good_token_logs_in_with_strict_cookies_and_the_api_takes_the_cookie(web: Web) -> None:
    browser = web.browser()
    answer = browser.post("/ui/login", data={"token": web.tokens[OWNER]})
    assert answer.status_code == 303
    (session,) = answer.headers.get_list("set-cookie")  # no cookie a script could read
    assert session.startswith(f"{web.cookie}=")  # its port's: another dashboard keeps its own
    assert "HttpOnly" in session and "SameSite=strict" in session and "Path=/" in session
    assert "Secure" not in session  # plain http on loopback: a Secure cookie would be dropped
    key = _keep_key(browser, answer, "/ui/")
    assert key not in session
    assert browser.get("/api/v1/whoami").json()["user"] == OWNER
    who = browser.get("/ui/session").json()
    assert who["user"] == OWNER and who["scope"] == "submit" and key not in str(who)


def test_the_cookie_without_the_pages_key_admits_nobody(web: Web) -> None:
    browser = web.browser()
    key = _login(browser, web.tokens[OWNER])
    # What a page on another port of this host gets: the cookie (browsers scope by host).
    stolen = web.browser()
    stolen.cookies.set(web.cookie, browser.cookies[web.cookie])
    job = {"command": ["true"], "workdir": "/"}
    for method, path, body in (
        ("GET", "/api/v1/whoami", None), ("GET", "/api/v1/jobs", None),
        ("POST", "/api/v1/jobs", job), ("POST", "/api/v1/tokens", {"scope": "submit"}),
        ("POST", "/api/v1/web/login-link", None),
    ):  # fmt: skip
        for headers in ({}, {"X-Session-Key": "guess"}, {"X-CSRF-Token": "guess"}):
            answer = stolen.request(method, path, json=body, headers=headers)
            assert answer.status_code == 401, (path, answer.text)
            assert "X-Session-Key" in _one_line_error(answer)
    assert stolen.get("/ui/session").status_code == 401
    assert stolen.post("/ui/logout").status_code == 403  # nor can it log her out
    # Sent by another page of this site (a browser says so), even with the key: refused.
    sent = {"Sec-Fetch-Site": "same-site"}
    answer = browser.get("/api/v1/whoami", headers=sent)
    assert answer.status_code == 403 and "Sec-Fetch-Site" in _one_line_error(answer)
    own = browser.get("/api/v1/whoami", headers={"Sec-Fetch-Site": "same-origin"})
    assert own.status_code == 200
    assert browser.get("/api/v1/jobs").status_code == 200  # her own page: still hers
    assert key == browser.headers["X-Session-Key"]


def test_a_session_over_https_sets_secure_cookies(web: Web) -> None:
    browser = web.browser()
    answer = browser.post(
        "/ui/login", data={"token": web.tokens[OWNER]}, headers={"X-Forwarded-Proto": "https"}
    )
    assert all("Secure" in c for c in answer.headers.get_list("set-cookie"))


def test_a_wrong_token_is_refused_and_makes_no_session(web: Web) -> None:
    browser = web.browser()
    answer = browser.post("/ui/login", data={"token": "gpy_" + "x" * 43})
    assert "missing or wrong API token" in _login_refusal(answer)
    assert web.cookie not in browser.cookies
    as_json = browser.post("/ui/login", json={"token": "nope"})
    assert as_json.status_code == 401
    assert "wrong API token" in _one_line_error(as_json)
    assert browser.get("/api/v1/jobs").status_code == 401


def test_a_page_without_a_session_goes_to_the_login(web: Web) -> None:
    browser = web.browser()
    answer = browser.get("/ui/jobs/7")
    assert answer.status_code == 303
    assert answer.headers["location"] == "/ui/login?next=/ui/jobs/7"
    page = browser.get("/ui/login?next=/ui/jobs/7")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    answer = browser.post("/ui/login", data={"token": web.tokens[OWNER], "next": "/ui/jobs/7"})
    _keep_key(browser, answer, "/ui/jobs/7")
    # Never somewhere else (an open redirect).
    evil = web.browser().post(
        "/ui/login", data={"token": web.tokens[OWNER], "next": "//evil.example/"}
    )
    assert urlsplit(evil.headers["location"]).path == "/ui/"


def test_a_session_changes_only_with_the_pages_key(web: Web) -> None:
    browser = web.browser()
    key = _login(browser, web.tokens[OWNER])
    del browser.headers["X-Session-Key"]
    job = {"command": ["true"], "workdir": "/"}
    missing = browser.post("/api/v1/jobs", json=job)
    assert missing.status_code == 401
    assert "X-Session-Key" in _one_line_error(missing)
    wrong = browser.post("/api/v1/jobs", json=job, headers={"X-Session-Key": "guess"})
    assert wrong.status_code == 401
    made = browser.post("/api/v1/jobs", json=job, headers={"X-Session-Key": key})
    assert made.status_code == 201, made.text
    assert made.json()["owner"] == OWNER
    # Nothing was queued by the refused ones.
    mine = browser.get("/api/v1/jobs", params={"user": OWNER}, headers={"X-Session-Key": key})
    mine = mine.json()
    assert [j["id"] for j in mine] == [made.json()["id"]]


def test_a_foreign_origin_is_refused_even_with_the_pages_key(web: Web) -> None:
    browser = web.browser()
    _login(browser, web.tokens[OWNER])
    answer = browser.post(
        "/api/v1/jobs",
        json={"command": ["true"], "workdir": "/"},
        headers={"Origin": "http://evil.example"},
    )
    assert answer.status_code == 403
    assert "another site" in _one_line_error(answer)
    login = web.browser().post(
        "/ui/login", data={"token": web.tokens[OWNER]}, headers={"Origin": "http://evil.example"}
    )
    assert login.status_code == 403


def test_a_session_sees_only_what_its_user_may(web: Web) -> None:
    other = web.browser()
    _login(other, web.tokens[OTHER])
    # Still in the queue when it is listed (a `true` could end first: the list is the queue).
    job = {"command": ["sleep", "600"], "workdir": "/"}
    theirs = other.post("/api/v1/jobs", json=job).json()["id"]
    browser = web.browser()
    _login(browser, web.tokens[OWNER])
    assert browser.get(f"/api/v1/jobs/{theirs}").status_code == 404
    assert browser.get(f"/api/v1/jobs/{theirs}/log").status_code == 404
    listed = {j["id"]: j for j in browser.get("/api/v1/jobs").json()}
    assert listed[theirs]["command"] == []  # the queue shows who and what size, not what


def test_a_read_token_makes_a_read_only_session(web: Web) -> None:
    owner = web.browser()
    _login(owner, web.tokens[OWNER])
    read = owner.post("/api/v1/tokens", json={"scope": "read"}).json()["token"]
    browser = web.browser()
    _login(browser, read)
    assert browser.get("/api/v1/jobs").status_code == 200
    answer = browser.post("/api/v1/jobs", json={"command": ["true"], "workdir": "/"})
    assert answer.status_code == 403
    assert "scope is read" in _one_line_error(answer)


def test_a_revoked_token_ends_its_sessions(web: Web) -> None:
    browser = web.browser()
    _login(browser, web.tokens[OWNER])
    made = browser.post("/api/v1/tokens", json={"scope": "read"})
    second = web.browser()
    _login(second, made.json()["token"])
    revoked = browser.delete(f"/api/v1/tokens/{made.json()['id']}")
    assert revoked.status_code == 200, revoked.text
    answer = second.get("/api/v1/jobs")
    assert answer.status_code == 401
    assert "session ended" in _one_line_error(answer)


def test_logout_ends_the_session(web: Web) -> None:
    browser = web.browser()
    key = _login(browser, web.tokens[OWNER])
    cookie = browser.cookies[web.cookie]
    # No key: not a logout.
    assert browser.post("/ui/logout", headers={"X-Session-Key": ""}).status_code == 403
    out = browser.post("/ui/logout")
    assert out.status_code == 303
    # The old cookie and key, kept by someone, no longer work.
    stale = web.browser()
    stale.cookies.set(web.cookie, cookie)
    answer = stale.get("/api/v1/jobs", headers={"X-Session-Key": key})
    assert answer.status_code == 401 and "session ended" in _one_line_error(answer)


def test_a_session_ends_after_its_idle_time(web: Web) -> None:
    sessions = web.server.web_sessions
    now = [1000.0]
    sessions._clock = lambda: now[0]
    browser = web.browser()
    _login(browser, web.tokens[OWNER])
    assert browser.get("/api/v1/jobs").status_code == 200
    now[0] += sessions.idle_s + 1
    answer = browser.get("/api/v1/jobs")
    assert answer.status_code == 401 and "session ended" in _one_line_error(answer)
    assert browser.get("/ui/jobs").status_code == 303  # pages: to the login again


def test_a_login_link_works_once(web: Web) -> None:
    owner_cli = web.browser()
    owner_cli.headers["Authorization"] = f"Bearer {web.tokens[OWNER]}"
    link = owner_cli.post("/api/v1/web/login-link")
    assert link.status_code == 200, link.text
    path = link.json()["path"]
    assert link.json()["user"] == OWNER and link.json()["expires_in_s"] == 60
    browser = web.browser()
    page = browser.get(path)  # opening the link logs nobody in by itself (a mail scanner)
    assert page.status_code == 200 and f"Continue as {OWNER}" in page.text
    assert web.cookie not in browser.cookies
    code = re.search(r'name="code" value="([^"]+)"', page.text)
    assert code is not None
    _keep_key(browser, browser.post("/ui/login", data={"code": code.group(1)}), "/ui/")
    assert browser.get("/api/v1/whoami").json()["user"] == OWNER
    again = web.browser().post("/ui/login", data={"code": code.group(1)})
    assert "used already" in _login_refusal(again)
    assert web.browser().get(path).status_code == 401


def test_a_login_link_expires_after_a_minute(web: Web) -> None:
    sessions = web.server.web_sessions
    now = [1000.0]
    sessions._clock = lambda: now[0]
    cli = web.browser()
    cli.headers["Authorization"] = f"Bearer {web.tokens[OWNER]}"
    code = cli.post("/api/v1/web/login-link").json()["path"].split("code=")[1]
    now[0] += 61
    assert "more than a minute old" in _login_refusal(
        web.browser().post("/ui/login", data={"code": code})
    )


def test_static_files_carry_types_caching_and_a_strict_policy(web: Web) -> None:
    browser = web.browser()
    answer = browser.get("/ui/static/vendor/uplot/uPlot.iife.min.js")
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/javascript")
    csp = answer.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
    assert "unsafe-inline" not in csp and "http" not in csp
    assert answer.headers["x-frame-options"] == "DENY"
    assert answer.headers["x-content-type-options"] == "nosniff"
    etag = answer.headers["etag"]
    assert answer.headers["cache-control"] == "no-cache"
    assert browser.get(answer.url, headers={"If-None-Match": etag}).status_code == 304
    pinned = browser.get(f"/ui/static/vendor/uplot/uPlot.min.css?v={etag.strip(chr(34))}")
    assert pinned.headers["content-type"].startswith("text/css")
    css_etag = pinned.headers["etag"].strip('"')
    pinned = browser.get(f"/ui/static/vendor/uplot/uPlot.min.css?v={css_etag}")
    assert "immutable" in pinned.headers["cache-control"]
    for sneaky in ("..%2F..%2F__init__.py", ".hidden", "vendor/%2E%2E/%2E%2E/bootstrap.py"):
        assert browser.get(f"/ui/static/{sneaky}").status_code == 404
    _login(browser, web.tokens[OWNER])
    shell = browser.get("/ui/gpus")
    assert shell.status_code == 200 and shell.headers["content-type"].startswith("text/html")
    assert shell.headers["content-security-policy"] == csp


def test_a_session_in_use_still_ends_seven_days_after_its_login(web: Web) -> None:
    sessions = web.server.web_sessions
    now = [1000.0]
    sessions._clock = lambda: now[0]
    browser = web.browser()
    _login(browser, web.tokens[OWNER])
    while now[0] - 1000.0 < sessions.max_age_s - 3600:
        now[0] += 3600  # used every hour: never idle
        assert browser.get("/api/v1/whoami").status_code == 200
    now[0] += 3600
    answer = browser.get("/api/v1/whoami")
    assert answer.status_code == 401 and "session ended" in _one_line_error(answer)


def test_a_json_login_answers_who_and_the_pages_key(web: Web) -> None:
    browser = web.browser()
    answer = browser.post("/ui/login", json={"token": web.tokens[OWNER]})
    assert answer.status_code == 200
    body = answer.json()
    assert (body["user"], body["scope"]) == (OWNER, "submit")
    assert browser.get("/api/v1/whoami").status_code == 401  # the cookie alone
    whoami = browser.get("/api/v1/whoami", headers={"X-Session-Key": body["key"]})
    assert whoami.json()["user"] == OWNER
    assert web.browser().get("/ui/login?code=made-up").status_code == 401


def test_a_session_mints_nothing_that_outlives_it(web: Web) -> None:
    browser = web.browser()
    _login(browser, web.tokens[OWNER])
    ends_by = time.time() + web.server.web_sessions.max_age_s + 5
    made = browser.post("/api/v1/tokens", json={"scope": "submit", "expires": "never"})
    assert made.status_code == 201, made.text
    assert made.json()["expires_at"] is not None and made.json()["expires_at"] <= ends_by
    longer = browser.post("/api/v1/tokens", json={"scope": "submit", "expires": "90d"})
    assert longer.json()["expires_at"] <= ends_by
    shorter = browser.post("/api/v1/tokens", json={"scope": "read", "expires": "1h"})
    assert shorter.json()["expires_at"] <= time.time() + 3600 + 5
    # A login link asked for by a session makes a session that ends with it.
    sessions = web.server.web_sessions
    now = [1000.0]
    sessions._clock = lambda: now[0]
    sessions.idle_s = 2 * sessions.max_age_s  # only the deadline ends these
    first = web.browser()
    _login(first, web.tokens[OWNER])
    now[0] += sessions.max_age_s - 600  # ten minutes before its end
    code = first.post("/api/v1/web/login-link").json()["path"].split("code=")[1]
    second = web.browser()
    _keep_key(second, second.post("/ui/login", data={"code": code}), "/ui/")
    assert second.get("/api/v1/whoami").status_code == 200
    token = second.post("/api/v1/tokens", json={"scope": "read"}).json()
    assert token["expires_at"] <= time.time() + 600 + 5
    now[0] += 601
    assert second.get("/api/v1/whoami").status_code == 401  # ended with the first
    # A token's own login link is not a session's: its sessions get their whole life.
    cli = web.browser()
    cli.headers["Authorization"] = f"Bearer {web.tokens[OWNER]}"
    code = cli.post("/api/v1/web/login-link").json()["path"].split("code=")[1]
    third = web.browser()
    _keep_key(third, third.post("/ui/login", data={"code": code}), "/ui/")
    now[0] += sessions.max_age_s - 60
    assert third.get("/api/v1/whoami").status_code == 200


@pytest.mark.skipif(os.geteuid() != 0, reason="root's account is a root server's")
def test_root_may_not_log_in_to_the_dashboard_by_default(web: Web, tmp_path: Path) -> None:
    browser = web.browser()
    answer = browser.post("/ui/login", json={"token": web.admin_token})
    assert answer.status_code == 403
    message = _one_line_error(answer)
    assert "admin account" in message and "GPUYARD_ALLOW_ROOT_DASHBOARD" in message
    assert web.cookie not in browser.cookies
    form = browser.post("/ui/login", data={"token": web.admin_token})
    assert "admin account" in _login_refusal(form)
    cli = web.browser()
    cli.headers["Authorization"] = f"Bearer {web.admin_token}"
    link = cli.post("/api/v1/web/login-link")  # `sudo gpuyard dashboard`: told at once
    assert link.status_code == 403 and "admin account" in _one_line_error(link)
    # An admin account logs in (and acts as an admin); a server setting lets root in.
    assert cli.post("/api/v1/admin/users", json={"name": "ops", "role": "admin"}).status_code == 201
    assert web.server.accounts is not None
    secret, _ = web.server.accounts.create_token(Principal("ops", "admin", None, "admin"))
    admin = web.browser()
    _login(admin, secret)
    assert admin.get("/api/v1/whoami").json()["role"] == "admin"
    settings = Settings(state_dir=tmp_path / "allowed", gpus="0", cpus=1, allow_root_dashboard=True)
    _, app = build_app(settings)
    with TestClient(app, base_url=settings.url, follow_redirects=False) as allowed:
        token = settings.token_path.read_text().strip()
        assert allowed.post("/ui/login", json={"token": token}).status_code == 200
