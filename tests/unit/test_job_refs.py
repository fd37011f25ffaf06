"""Job references as Slurm writes them (`12`, `12_3`, `12_[1-3,5]`) and an array folded into
one `queue` line per state group (`12_[3-99%8]` for its pending tasks, `12_0` each other)."""

from __future__ import annotations

from typing import Any

import pytest

from gpuyard.cli.job_refs import check, label, split
from gpuyard.cli.queue_format import array_summary, fold_arrays, format_jobs, index_ranges


@pytest.mark.parametrize(
    ("text", "parsed"),
    [("12", (12, None)), (" 7 ", (7, None)), ("12_3", (12, (3,))), ("12_0", (12, (0,))),
     ("12_[1-3,5]", (12, (1, 2, 3, 5))), ("40_[0-15:4]", (40, (0, 4, 8, 12)))],
)  # fmt: skip
def test_references_name_a_job_a_task_or_tasks(text: str, parsed: Any) -> None:
    assert split(check(text)) == parsed


@pytest.mark.parametrize(
    "text", ["", "x", "0", "-3", "12_", "_3", "12_x", "12_3_4", "12_[]", "12_[x]", "12_[5-1]",
             "12_[1-3", "\uff11\uff12"],  # full-width digits: isdigit() but not ids
)  # fmt: skip
def test_anything_else_is_refused_in_one_line_saying_what_to_give(text: str) -> None:
    with pytest.raises(ValueError) as info:
        split(text)
    message = str(info.value)
    assert "\n" not in message and "12_3" in message and "12_[1-3,5]" in message


def _task(array_id: int, index: int, state: str = "PENDING", **more: Any) -> dict[str, Any]:
    return {"id": array_id + index, "array_job_id": array_id, "array_task_id": index,
            "state": state, "name": "t", "owner": "ada", "reason": "Priority",
            "array_max_running": 8, **more}  # fmt: skip


def test_pending_tasks_fold_into_one_line_where_the_first_was_and_others_stay() -> None:
    plain = {"id": 5, "state": "PENDING", "name": "p", "owner": "bo", "reason": "Resources"}
    jobs = [plain, _task(10, 0, "RUNNING"), _task(10, 1, "RUNNING"),
            *(_task(10, i) for i in (2, 3, 4, 7, 9)), {**plain, "id": 99}]  # fmt: skip
    folded = fold_arrays(jobs)
    assert [label(job) for job in folded] == ["5", "10_0", "10_1", "10_[2-4,7,9%8]", "99"]
    assert folded[3]["array_pending"] == 5 and folded[3]["reason"] == "Priority"
    assert jobs[2] is folded[2] and "shown_id" not in jobs[2]  # the records are not changed
    assert format_jobs(folded, "%i %T").splitlines()[4] == "10_[2-4,7,9%8] PENDING"


def test_one_pending_task_without_a_cap_is_named_as_a_task() -> None:
    folded = fold_arrays([_task(3, 4, array_max_running=0)])
    assert label(folded[0]) == "3_4"


def test_index_ranges_and_the_arrays_summary() -> None:
    assert index_ranges([0, 1, 2, 3, 7, 9, 10]) == "0-3,7,9-10"
    assert index_ranges([5]) == "5"
    tasks = [_task(10, 0, "RUNNING"), _task(10, 1, "COMPLETED"), _task(10, 2), _task(10, 3)]
    assert array_summary(tasks) == (
        "Array 10: 4 tasks (0-3), at most 8 running: 1 RUNNING, 1 COMPLETED, 2 PENDING"
    )
