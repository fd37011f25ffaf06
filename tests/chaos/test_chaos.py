"""Crash safety, proven (issue 12), small form: a few hundred short jobs over 4 GPUs with the
preemptive policy, the server SIGKILLed at 24 moments (half of them at named crash points:
after a journal write, between a submit's commit and its reply, mid-pass, between a launch and
its pid record, after a preemption's intent, after a drain) and restarted each time. Then,
from the database and from what the jobs wrote: nothing acknowledged is lost or stored twice,
no job ran twice at once, no GPU was held by two jobs at once, every final state and exit code
is true, and everything reached a final state. The long form: bench/chaos.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.chaos.rig import ChaosRig, server_takes_idempotency_keys

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

JOBS = int(os.environ.get("GPUYARD_CHAOS_JOBS", "300"))
KILLS = int(os.environ.get("GPUYARD_CHAOS_KILLS", "24"))
SEED = int(os.environ.get("GPUYARD_CHAOS_SEED", "12"))


def test_sigkills_lose_nothing_run_nothing_twice_and_double_book_no_gpu(tmp_path: Path) -> None:
    rig = ChaosRig(tmp_path, jobs=JOBS, kills=KILLS, seed=SEED,
                   idempotent=server_takes_idempotency_keys())  # fmt: skip
    report = rig.run()
    kills = "\n".join(report.summary()["kills"])
    assert not report.problems, "\n".join(report.problems) + f"\nkills:\n{kills}"
    assert report.kills_survived >= min(20, KILLS)
    fired = {k.point for k in report.kills if k.how == "crash point"}
    assert len(fired) >= 4 or KILLS < 20, f"few named crash points were reached:\n{kills}"
    assert report.acknowledged >= JOBS * 0.9
    assert report.lost == report.duplicated == report.double_run == report.double_booked == 0
    if report.idempotent_submits:
        assert report.acknowledged == JOBS and report.in_flight == 0
    assert report.preempted_or_requeued_runs > 0 and report.cancels > 0
