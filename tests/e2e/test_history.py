"""History through the CLI: `queue --all` pages (newest first) and filters, served from the
store, so a long history neither fills the server's memory nor one answer."""

from __future__ import annotations

import getpass
import json
from pathlib import Path

from gpuyard.adapters.store.sql import SqlJobStore, sqlite_url
from gpuyard.cli.commands import HISTORY_PAGE
from gpuyard.domain.job import Job, JobSpec
from gpuyard.domain.states import JobState
from tests.e2e.conftest import SERVER_ARGS
from tests.e2e.server import ServerProcess


def _ids(server: ServerProcess, *args: str) -> list[int]:
    return [job["id"] for job in json.loads(server.cli("queue", *args, "--json").stdout)]


def test_queue_all_pages_and_filters_history(server: ServerProcess) -> None:
    done = [int(server.cli("submit", "--name", "done", "--", "true").stdout) for _ in range(4)]
    failed = int(server.cli("submit", "--name", "broken", "--", "false").stdout)
    server.cli("wait", *map(str, [*done, failed]), check=False)
    everything = [*done, failed]

    assert _ids(server, "--all") == everything
    newest = server.cli("queue", "--all", "--limit", "2")
    assert f"--before {done[-1]}" in newest.stderr  # how to ask for the next page
    assert _ids(server, "--all", "--limit", "2") == [done[-1], failed]
    assert _ids(server, "--all", "--limit", "2", "--before", str(done[-1])) == done[1:3]
    assert _ids(server, "--all", "--state", "failed") == [failed]
    assert _ids(server, "--all", "--name", "done", "--since", "1h") == done
    assert _ids(server, "--all", "--since", "2099-01-01") == []
    assert _ids(server) == []  # without --all: only pending and running jobs
    bad = server.cli("queue", "--all", "--since", "yesterday-ish", check=False)
    assert bad.returncode != 0 and "use a duration ago" in bad.stderr


def _finished_history(state_dir: Path, count: int) -> None:
    """`count` finished jobs of this user, written to the state dir's database before the
    server starts (as a long-lived server's history is)."""
    store = SqlJobStore(sqlite_url(state_dir / "gpuyard.db"))
    spec = JobSpec(argv=("true",), name="old", workdir=str(state_dir), gpus=1)
    at = 1_700_000_000.0
    jobs = [Job(id=i, spec=spec, owner=getpass.getuser(), state=JobState.COMPLETED,
                submitted_at=at + i, started_at=at + i + 1, ended_at=at + i + 2, exit_code=0)
            for i in range(1, count + 1)]  # fmt: skip
    try:
        store.write(jobs, [])
    finally:
        store.close()


def test_queue_all_shows_the_newest_page_of_a_long_history(tmp_path: Path) -> None:
    """`queue --all` on a server with more history than a page: the newest page, and how to
    see older jobs (it used to ask the server for all 10,000 it may send at once: ~1.3 s of
    its CPU per request with 20,000 finished jobs, every other request waiting behind it)."""
    jobs = HISTORY_PAGE + 50
    server = ServerProcess(tmp_path / "state", *SERVER_ARGS)
    server.state_dir.mkdir(parents=True)
    _finished_history(server.state_dir, jobs)
    server.start()
    try:
        shown = _ids(server, "--all")
        assert shown == list(range(jobs - HISTORY_PAGE + 1, jobs + 1))
        table = server.cli("queue", "--all")
        assert f"--before {jobs - HISTORY_PAGE + 1}" in table.stderr  # the next page
        as_json = server.cli("queue", "--all", "--json")  # a script is told too, on stderr
        assert len(json.loads(as_json.stdout)) == HISTORY_PAGE
        assert f"--before {jobs - HISTORY_PAGE + 1}" in as_json.stderr
        older = _ids(server, "--all", "--before", str(jobs - HISTORY_PAGE + 1))
        assert older == list(range(1, jobs - HISTORY_PAGE + 1))
        assert len(_ids(server, "--all", "--limit", str(jobs))) == jobs  # asked for: all
    finally:
        server.stop()
        server.kill_jobs()
