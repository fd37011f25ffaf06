"""`open_store` against a PostgreSQL server that is not there (a free port, nothing listening):
a plain server is refused in one line; a standby says once that it cannot use the database
yet and keeps asking (a database restart must not end the server ready to take over).
`tests/e2e/test_postgres_restart_standby.py` restarts a real one."""

from __future__ import annotations

import socket

import pytest

from gpuyard.bootstrap.store import open_store
from gpuyard.domain.errors import Unavailable
from gpuyard.settings import Settings


class _StopWaiting(Exception):
    """Raised by the test's `say` to end the standby's wait (it would ask for ever)."""


def _nowhere() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"postgresql://gpuyard:pw@127.0.0.1:{port}/gpuyard"


def test_a_plain_server_is_refused_in_one_line(tmp_path):
    settings = Settings(state_dir=tmp_path, database_url=_nowhere())
    with pytest.raises(Unavailable) as refused:
        open_store(settings)
    message = refused.value.message
    assert "cannot use the database PostgreSQL" in message and "\n" not in message
    assert "pw" not in message.replace("postgresql", "")


def test_a_standby_waits_through_a_database_it_cannot_reach(tmp_path):
    said: list[str] = []

    def say(line: str) -> None:
        said.append(line)
        raise _StopWaiting  # it waits (not refused): enough here, the e2e test waits on

    settings = Settings(state_dir=tmp_path, database_url=_nowhere(), standby=True)
    with pytest.raises(_StopWaiting):
        open_store(settings, say)
    # One line on the first refusal (the next only a minute later), not an Unavailable.
    assert said[0].startswith("standby: cannot use PostgreSQL") and "still waiting" in said[0]
    assert "Connection refused" in said[0] or "connection" in said[0].lower()
    assert ":***@" in said[0] and "pw@" not in said[0]
