from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.server import ServerProcess
from tests.e2e.unix_users import UnixUsers, unix_users

pytestmark = pytest.mark.e2e


SERVER_ARGS = ("--gpus", "4", "--cpus", "32", "--kill-grace", "1")


@pytest.fixture
def server(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[ServerProcess]:
    """A server with 4 declared GPUs, enough CPUs for parallel jobs, a 1 s kill grace; a test
    module's own ``SERVER_ARGS`` (``gpuyard server`` options) replace these."""
    args = getattr(request.module, "SERVER_ARGS", SERVER_ARGS)
    srv = ServerProcess(tmp_path / "state", *args)
    srv.start()
    yield srv
    srv.stop()
    srv.kill_jobs()


@pytest.fixture(scope="module")
def users() -> Iterator[UnixUsers]:
    """Real Unix users alice and bob (and alice's team), made for one test module and removed
    after it; skips unless root with useradd."""
    with unix_users() as made:
        yield made
