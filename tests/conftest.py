"""Fixtures shared by every test folder: a PostgreSQL server, started once per session when a
test first asks for it (the store contract suite, the server takeover test, the benchmarks'
checks)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.postgres_server import PostgresServer, find_bin_dir, in_ci


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """A throw-away PostgreSQL server on loopback; `create_database(name)` gives a URL.
    Without Debian's postgresql installed: skipped, except under CI, where it fails."""
    bin_dir = find_bin_dir()
    if bin_dir is None:
        why = "PostgreSQL's server is not installed (no /usr/lib/postgresql/*/bin/initdb)"
        if in_ci():
            pytest.fail(f"{why}; CI is set, so the PostgreSQL tests must run: `make test`"
                        " installs it", pytrace=False)  # fmt: skip
        pytest.skip(f"{why}: apt-get install postgresql")
    server = PostgresServer(bin_dir)
    server.start()
    yield server
    server.stop()
