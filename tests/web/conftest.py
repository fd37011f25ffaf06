"""The dashboard in a real headless Chromium (Debian's, driven by playwright): one browser per
session, one real server per test module with accounts alice and bob, a logged-in page each.

Without playwright or /usr/bin/chromium the tests skip; under CI=1 they fail (`make test`
installs both). Screenshots go to the session's tmp folder, and with GPUYARD_SCREENSHOTS=DIR
also to DIR (docs/screenshots: the README's)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.web.rig import (
    Dashboard,
    login,
    shared_place,
    start_dashboard,
    stop_dashboard,
)

if TYPE_CHECKING:
    from playwright.sync_api import Browser, BrowserContext, Page


@pytest.fixture(scope="session")
def unix_accounts() -> Iterator[dict[str, str | None]]:
    """alice's and bob's Unix users on a root server (whose jobs must run as someone); none
    on another (its jobs run as the server's user)."""
    if os.geteuid() != 0:
        yield {"alice": None, "bob": None}
        return
    from tests.e2e.unix_users import unix_users

    with unix_users() as made:
        yield {"alice": made.alice, "bob": made.bob}


@pytest.fixture(scope="module")
def dashboard(unix_accounts: dict[str, str | None]) -> Iterator[Dashboard]:
    with shared_place() as place:
        dash = start_dashboard(place, unix_accounts)
        try:
            yield dash
        finally:
            stop_dashboard(dash)


@pytest.fixture
def as_user(browser: Browser, dashboard: Dashboard) -> Iterator[Callable[[str], Page]]:
    """`as_user("alice")`: a page logged in as alice (or "bob", "admin"); closed after."""
    contexts: list[BrowserContext] = []

    def make(who: str) -> Page:
        token = dashboard.browser_admin_token if who == "admin" else dashboard.users[who].token
        page = login(browser, dashboard.url, token)
        contexts.append(page.context)
        return page

    yield make
    for context in contexts:
        context.close()


@pytest.fixture(scope="session")
def screenshots(tmp_path_factory: pytest.TempPathFactory) -> Callable[[Page, str], Path]:
    """`shoot(page, "queue")`: a PNG of the page in the session's tmp (and in
    $GPUYARD_SCREENSHOTS, when set); its path."""
    folder = tmp_path_factory.mktemp("screenshots")
    extra = os.environ.get("GPUYARD_SCREENSHOTS")

    def shoot(page: Page, name: str) -> Path:
        path = folder / f"{name}.png"
        page.screenshot(path=str(path), full_page=False)
        if extra:
            Path(extra).mkdir(parents=True, exist_ok=True)
            (Path(extra) / path.name).write_bytes(path.read_bytes())
        return path

    return shoot
