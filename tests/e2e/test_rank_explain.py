"""Decisions explain themselves (issue 25): `gpuyard show` of a pending job says its rank in the
policy's order and the factors of the policy's key (sprio-style), `queue` its rank beside its
reason, through a real server."""

from __future__ import annotations

import json
import re

from tests.e2e.server import ServerProcess, wait_for

SERVER_ARGS = ("--gpus", "2", "--cpus", "8", "--kill-grace", "1")


def test_show_says_where_a_pending_job_ranks_and_why(server: ServerProcess) -> None:
    blocker = server.cli("submit", "--gpus", "2", "--", "sleep", "300").stdout.strip()
    wait_for(lambda: server.client().job(int(blocker))["state"] == "RUNNING", timeout_s=60)
    big = server.cli("submit", "--gpus", "2", "--", "true").stdout.strip()
    small = server.cli("submit", "--gpus", "1", "--", "true").stdout.strip()

    # No run has finished: an hour is assumed of each, so 1 GPU-hour beats 2, and the job
    # queued later ranks first.
    def ranked() -> bool:
        return server.client().job(int(small)).get("rank") == 1

    wait_for(ranked, timeout_s=30)
    shown = server.cli("show", small).stdout
    assert re.search(
        r"^ *Rank: 1 of 2 \(default: least expected remaining GPU-time first, divided by the "
        r"share weight\)$", shown, re.MULTILINE,
    ), shown  # fmt: skip
    factors = re.search(r"^ *RankFactors: (.*)$", shown, re.MULTILINE)
    assert factors is not None, shown
    # Neither may be preempted (the default): ranked by GPUs x predicted run, halving as it waits.
    assert factors.group(1).startswith(
        "GPUs 1, predicted run 60 min (no finished runs and no time limit: 60 min assumed), "
        "GPU-time 60 GPU-min, share weight 1, age waited "
    ), shown
    # Every GPU-second so far is its user's (the blocker's): at its share, so every 4 h.
    assert (", its GPU-time halves every 4 h it waits (its user had 100% of the recent GPU time "
            "for a 100% share: 4 h at or over the share, down to 30 min), next in ") in (
        factors.group(1)), shown  # fmt: skip
    other = server.cli("show", big).stdout
    assert "Rank: 2 of 2 (default:" in other and "GPU-time 2 GPU-h" in other, other

    record = json.loads(server.cli("show", "--json", big).stdout)
    assert (record["rank"], record["rank_among"]) == (2, 2)
    assert record["rank_factors"].startswith("GPUs 2, ")
    rows = {line.split()[0]: line for line in server.cli("queue").stdout.splitlines()[1:]}
    assert rows[small].rstrip().endswith("(Resources) 1/2"), rows
    assert rows[big].rstrip().endswith("(Priority) 2/2"), rows
    assert "Rank" not in server.cli("show", blocker).stdout  # running: nothing to rank
    server.cli("cancel", blocker, big, small)
