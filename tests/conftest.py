"""Fixtures shared by every test folder: a PostgreSQL server, started once per session when a
test first asks for it (the store contract suite, the server takeover test, the benchmarks'
checks)."""

from __future__ import annotations

import importlib.util
import os
import re
import signal
from collections.abc import Iterator
from typing import TYPE_CHECKING, NoReturn

import pytest

from tests.needs import missing

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Playwright

    from tests.postgres_server import PostgresServer

# A root test run never touches the machine's Unix socket (/run/gpuyard/gpuyard.sock): a server
# a test starts (or one refused at start, which binds it first) would take over, or be refused
# by, a real server's local users. Every process the tests start inherits this; a test that
# wants a socket names its own (`--socket` or GPUYARD_SOCKET under its tmp_path).
os.environ.setdefault("GPUYARD_SOCKET", "off")


# `TEST_WORKERS=2 make test` runs the suite on two pytest-xdist workers: most tests wait on
# real processes, so two at a time fill a 2-core machine's idle time. What must not run beside
# its own kind runs on one worker, in turn: the Ray clusters (each several processes and GBs;
# some tests look for Ray's orphans and raylets machine-wide) and the throw-away Slurm (its
# session fixture).
# xdist's own `--dist loadgroup` groups nothing under pytest 9.2 (it renames `item._nodeid`,
# which pytest no longer reads), so the grouping is this scheduler's: every other test is a
# scope of its own, load-balanced.
_ONE_AT_A_TIME = {
    "ray": re.compile(r"tests/raycluster/|\[ray\]|\[ray-|-ray\]|-ray-"),  # [ray]: the backend
    "slurm": re.compile(r"tests/slurm_side/"),
}


def pytest_configure(config: pytest.Config) -> None:
    """Ctrl-C's and Ctrl-\\'s default actions back, for this process and what it starts. A
    suite started in the background by a shell (`make test &`, `nohup ... &`, some CI runners)
    runs with SIGINT and SIGQUIT ignored, and every command a test types into inherits that:
    its Ctrl-C (`gpuyard top`, a progress bar) then did nothing and the test waited out its
    timeout. A handled signal is reset at exec, an ignored one is not."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if signal.getsignal(signal.SIGQUIT) is signal.SIG_IGN:
        signal.signal(signal.SIGQUIT, signal.SIG_DFL)


def one_at_a_time_group(nodeid: str) -> str | None:
    """The group a test runs in, one at a time on one worker; None: any worker, any time."""
    for group, pattern in _ONE_AT_A_TIME.items():
        if pattern.search(nodeid):
            return group
    return None


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    from xdist.scheduler import LoadScopeScheduling

    class OneAtATime(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return one_at_a_time_group(nodeid) or nodeid

    return OneAtATime(config, log)


def _missing(why: str) -> NoReturn:
    missing(why, "the PostgreSQL tests", "`make test` installs it")


def _started_postgres() -> Iterator[PostgresServer]:
    """A throw-away PostgreSQL server on loopback, stopped after; `create_database(name)`
    gives a URL. Without Debian's postgresql (or psycopg) installed: skipped, except under
    CI: failed."""
    if importlib.util.find_spec("psycopg") is None:
        _missing("psycopg is not installed (pip install -e '.[test]')")
    from tests.postgres_server import PostgresServer, find_bin_dir

    bin_dir = find_bin_dir()
    if bin_dir is None:
        _missing("PostgreSQL's server is not installed (no /usr/lib/postgresql/*/bin/initdb):"
                 " apt-get install postgresql")  # fmt: skip
    server = PostgresServer(bin_dir)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """The tests' shared PostgreSQL server (`_started_postgres`)."""
    yield from _started_postgres()


@pytest.fixture
def own_postgres() -> Iterator[PostgresServer]:
    """A PostgreSQL server for one test alone, which it may stop, restart or SIGSTOP without
    touching the shared one."""
    yield from _started_postgres()


def _no_browser(why: str) -> NoReturn:
    missing(why, "the dashboard's browser tests", "`make test` installs it")


@pytest.fixture(scope="module")
def playwright() -> Iterator[Playwright]:
    """Playwright for one module's browser tests (tests/web, the cluster's GPUs page). Not one
    for the session: its sync API runs an event loop on the main thread while it is open, and
    every later test calling `asyncio.run` would fail ("cannot be called from a running event
    loop")."""
    from tests.web.rig import CHROMIUM

    if importlib.util.find_spec("playwright") is None:
        _no_browser("playwright is not installed (pip install -e '.[test]')")
    if not os.access(CHROMIUM, os.X_OK):
        _no_browser(f"no {CHROMIUM}: apt-get install chromium")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        yield pw


@pytest.fixture(scope="module")
def browser(playwright: Playwright) -> Iterator[Browser]:
    from tests.web.rig import CHROMIUM, CHROMIUM_ARGS

    browser = playwright.chromium.launch(
        executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
    )
    yield browser
    browser.close()
