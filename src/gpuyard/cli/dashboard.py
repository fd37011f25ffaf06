"""`gpuyard dashboard`: a one-time link that logs a browser into the web dashboard as the
same user the CLI is (its token, or on the server's machine its Unix-socket identity: no
token to paste). The server makes the code (valid a minute, used once); the CLI prints the
link and, with `--open`, hands it to the desktop's browser."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpuyard.client import Client

LINK_PATH = "/api/v1/web/login-link"


def login_link(client: Client) -> dict[str, Any]:
    """The server's answer: `path`, `url` (on its address), `expires_in_s`, `user`."""
    answer: dict[str, Any] = client._json("POST", LINK_PATH)
    return answer


def link_url(answer: dict[str, Any], env: dict[str, str] | os._Environ[str] = os.environ) -> str:
    """Where the browser goes: the server's own address for it, or, when the user named the
    server (GPUYARD_URL, http or https), that address (what their browser reaches)."""
    given = env.get("GPUYARD_URL", "")
    if given.startswith(("http://", "https://")):
        return given.rstrip("/") + str(answer["path"])
    return str(answer["url"])


def run(client: Client, *, open_browser: bool, json_out: bool) -> int:
    answer = login_link(client)
    url = link_url(answer)
    if json_out:
        import json

        sys.stdout.write(json.dumps({**answer, "url": url}) + "\n")
    else:
        sys.stdout.write(
            f"{url}\n(logs a browser in as {answer['user']}: once, within "
            f"{answer['expires_in_s']} s)\n"
        )
    if open_browser:
        import webbrowser

        if not webbrowser.open(url):
            sys.stderr.write("gpuyard: no browser to open here: open the link above yourself\n")
    return 0
