"""How long a job is expected to run, from its owner's history (issue 25): `show` says it for a
pending or running job, `submit --dry-run` for one not queued yet, and a restarted server still
knows it."""

from __future__ import annotations

import json
import re

from tests.e2e.server import ServerProcess

SERVER_ARGS = ("--gpus", "2", "--cpus", "8", "--kill-grace", "1")
_LEARNED = re.compile(
    r"^ *ExpectedRun: expected \d+ s(?: \(\d+-\d+ s\))?, from your last 3 runs of this size and "
    r"time limit$",
    re.MULTILINE,
)


def test_show_and_dry_run_say_how_long_a_job_of_this_size_ran_before(
    server: ServerProcess,
) -> None:
    done = [server.cli("submit", "--gpus", "1", "--time", "1h", "--", "sleep", "1").stdout.strip()
            for _ in range(3)]  # fmt: skip
    server.cli("wait", *done, timeout_s=120)
    new = server.cli("submit", "--gpus", "1", "--time", "1h", "--", "sleep", "300").stdout.strip()
    shown = server.cli("show", new).stdout
    assert _LEARNED.search(shown), shown
    record = json.loads(server.cli("show", "--json", new).stdout)
    assert 1 <= record["expected_run_s"] < 60 and record["expected_run"].startswith("expected ")
    assert "ExpectedRun" not in server.cli("show", done[0]).stdout  # it ended: nothing to expect

    other = server.cli("show", server.cli("submit", "--gpus", "2", "--", "true").stdout.strip())
    assert "from the last" not in other.stdout.split("ExpectedRun")[0]  # no 2-GPU history:
    # the user's own runs then (all 1-GPU)
    server.cli("cancel", new)  # a cancelled run is not learned from
    server.cli("wait", new, check=False, timeout_s=60)
    dry = server.cli("submit", "--dry-run", "--gpus", "1", "--time", "1h", "--", "true").stdout
    assert "\nonce started: expected " in dry and dry.rstrip().endswith(
        "from your last 3 runs of this size and time limit"
    ), dry
    other_limit = server.cli("submit", "--dry-run", "--gpus", "1", "--time", "10m", "--", "true")
    assert other_limit.stdout.rstrip().endswith("from your last 3 runs of this size")

    server.stop()
    server.start()
    again = server.cli("submit", "--gpus", "1", "--time", "1h", "--", "sleep", "300").stdout.strip()
    assert _LEARNED.search(server.cli("show", again).stdout)  # rebuilt from the database
    server.cli("cancel", again)
