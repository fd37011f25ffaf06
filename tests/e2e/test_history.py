"""History through the CLI: `queue --all` pages (newest first) and filters, served from the
store, so a long history neither fills the server's memory nor one answer."""

from __future__ import annotations

import json

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
