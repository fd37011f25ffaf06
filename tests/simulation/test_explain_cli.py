"""`gpuyard simulate --explain JOB`: where a trace job ranked when it started, and why, in the
fields and words `gpuyard show` uses (Rank, RankFactors, ExpectedRun)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.simulation.test_replay import gpuyard, write_trace

# 8 GPUs. a's 1-GPU jobs run a minute, b's 4-GPU jobs 50 minutes: the history. Then c's 7-GPU
# job leaves one GPU free; b's 4-GPU job 7 waits for it; a's 1-GPU job 8 arrives behind it.
ROWS = ["0,a,0,1,60", "1,a,0,1,60", "2,a,0,1,60", "3,b,0,4,3000", "4,b,0,4,3000",
        "5,b,0,4,3000", "6,c,20000,7,1000", "7,b,20100,4,3000", "8,a,20200,1,60"]  # fmt: skip


def test_explain_says_where_the_job_ranked_when_it_started_under_each_policy(
    tmp_path: Path,
) -> None:
    trace = str(write_trace(tmp_path / "t.csv", ROWS))
    args = ["simulate", "--trace", trace, "--gpus", "8", "--preemptible-fraction", "0"]
    out = gpuyard(*args, "--compare", "default,fifo,backfill", "--explain", "8")
    assert out.returncode == 0 and out.stderr == "", out.stderr
    table, *explained = out.stdout.split("\n\n")
    assert table.splitlines()[0].startswith("POLICY")  # the figures first, as without it
    by_policy = {block.split(" under ")[1].split(",")[0]: block for block in explained}
    # default: the 1-minute job goes before the 50-minute one and takes the free GPU at once.
    assert by_policy["default"].splitlines()[:3] == [
        "job 8 under default, when it started at 20,200 s:",
        "         Rank: 1 of 2 (default: least expected remaining GPU-time first, divided by "
        "the share weight)",
        # no job is preemptible: ranked by GPUs x predicted run, halved as it waits, every 30
        # min: a's 3 GPU-min are next to nothing of the recent GPU time (b's, c's)
        "  RankFactors: GPUs 1, predicted run 60 s (expected 60 s, from your last 3 runs of "
        "this size without a time limit), GPU-time 60 GPU-s, share weight 1, age waited 0 s, "
        "its GPU-time halves every 30 min it waits (its user had 0% of the recent GPU time for "
        "a 33% share: 4 h at or over the share, down to 30 min), next in 30 min",
    ]
    assert by_policy["default"].splitlines()[3] == (
        "  ExpectedRun: expected 60 s, from your last 3 runs of this size without a time limit"
    )
    # fifo: nothing passes the head; it starts after job 7, 13 minutes later.
    assert "when it started at 21,000 s:\n         Rank: 1 of 1 (fifo:" in by_policy["fifo"]
    # backfill: second in line, it starts at once because it ends before the head's reservation.
    backfill = by_policy["backfill"]
    assert "at 20,200 s:\n         Rank: 2 of 2 (backfill:" in backfill
    assert "head (job 7) reserved in 13 min" in backfill and "ends before the reservation" in (
        backfill
    )

    record = json.loads(gpuyard(*args, "--policy", "default", "--explain", "8", "--json").stdout)
    assert record["explained"]["text"].startswith("rank 1 of 2 (default: least expected")
    assert record["explained"]["started"] is True and record["explained"]["at"] == 20200

    unknown = gpuyard(*args, "--explain", "99")
    assert unknown.returncode != 0
    assert unknown.stderr.strip() == "gpuyard: --explain 99: the trace has no job 99"
