"""The chaos checks themselves: each broken guarantee, written by hand into job records, is
found (a check that cannot fail would make the chaos test prove nothing)."""

from __future__ import annotations

import pytest

from tests.chaos import rig
from tests.chaos.rig import Plan, Run


def _run(job_id: int, start: float, end: float, gpus: tuple[int, ...], mem: int = 0) -> Run:
    return Run(job_id, 100 + job_id, start, end, "end", 0, gpus, mem)


def test_a_gpu_held_by_two_jobs_at_once_is_found_and_back_to_back_is_not() -> None:
    runs = {1: [_run(1, 0.0, 1.0, (0, 1))], 2: [_run(2, 1.0, 2.0, (1,))]}
    assert rig._double_booked(runs) == []
    runs[3] = [_run(3, 1.5, 3.0, (1, 2))]
    assert rig._double_booked(runs) == ["GPU 1: jobs 2 and 3"]


def test_shared_gpu_jobs_may_overlap_within_the_gpus_memory_only() -> None:
    mib = 20 * 1024
    runs = {i: [_run(i, 0.1 * i, 5.0, (0,), mib)] for i in range(1, 5)}
    assert rig._double_booked(runs) == []  # 4 x 20 GiB on an 80 GiB GPU
    runs[5] = [_run(5, 1.0, 2.0, (0,), mib)]
    assert len(rig._double_booked(runs)) == 4
    assert rig._double_booked({1: runs[1], 6: [_run(6, 1.0, 2.0, (0,))]}) == ["GPU 0: jobs 1 and 6"]


def test_records_give_runs_and_their_ends(tmp_path) -> None:  # type: ignore[no-untyped-def]
    r = rig.ChaosRig.__new__(rig.ChaosRig)
    r.records = tmp_path
    (tmp_path / "7").write_text(
        "start 10 1.0 0,2 0 0\nstop 10 2.0\nstart 11 3.0 1 1 0\nend 11 4.5 7\nstart 12 5.0 - 2 0\n"
    )
    runs = r.read_runs()[7]
    assert [(x.pid, x.start, x.end, x.how, x.code, x.gpus) for x in runs] == [
        (10, 1.0, 2.0, "stop", None, (0, 2)),
        (11, 3.0, 4.5, "end", 7, (1,)),
        (12, 5.0, None, "open", None, ()),
    ]


@pytest.mark.parametrize(
    ("plan_code", "state", "exit_code", "last", "cancel_sent", "wrong"),
    [
        (0, "COMPLETED", 0, ("end", 0), False, False),
        (7, "FAILED", 7, ("end", 7), False, False),
        (0, "FAILED", 7, ("end", 0), False, True),  # exit code not the job's
        (0, "COMPLETED", 0, ("stop", None), False, True),  # stopped, yet "completed"
        (7, "COMPLETED", 0, ("end", 7), False, True),
        (0, "CANCELLED", None, ("stop", None), False, True),  # nobody cancelled it
        (0, "CANCELLED", None, ("stop", None), True, False),
        (0, "NODE_FAIL", None, ("end", 0), False, True),
    ],
)
def test_untrue_final_states_are_found(
    plan_code: int,
    state: str,
    exit_code: int | None,
    last: tuple[str, int | None],
    cancel_sent: bool,
    wrong: bool,
) -> None:
    plan = Plan(1, 1, None, False, 0, 0.1, plan_code, None)
    run = Run(1, 5, 0.0, 1.0, last[0], last[1], (0,), 0)
    row = {"state": state, "exit_code": exit_code}
    assert (rig._wrong_state(plan, row, [run], cancel_sent, None) is not None) is wrong


def test_a_job_cancelled_with_200_must_end_cancelled() -> None:
    plan = Plan(1, 1, None, False, 0, 20.0, 0, 0.5)
    run = Run(1, 5, 0.0, 20.0, "end", 0, (0,), 0)
    completed = {"state": "COMPLETED", "exit_code": 0}
    assert rig._wrong_state(plan, completed, [run], True, 200) == "cancelled (200), but COMPLETED"
