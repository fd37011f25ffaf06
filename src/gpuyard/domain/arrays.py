"""Job arrays in sbatch's syntax: `--array 0-99%8`, `1,3,5`, `0-15:4`, `0-9,20-29%4`.

One submit makes a task per index; `%N` caps how many of them run at once. Task ids are the
indices as given (sorted, each once); their job ids are consecutive, and the array's id (Slurm's
%A) is its first task's job id.

    parse_array("0-6:2,9%2") -> ArraySpec(indices=(0, 2, 4, 6, 9), max_running=2)
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuyard.domain.errors import InvalidRequest

# Slurm's default MaxArraySize is 1001 tasks; a training server's sweeps are larger, and the
# queue is built for 10,000 pending jobs.
MAX_ARRAY_TASKS = 10_000
MAX_TASK_INDEX = 4_000_000


@dataclass(frozen=True, slots=True)
class ArraySpec:
    indices: tuple[int, ...]
    max_running: int = 0  # 0: no cap


def parse_array(text: str) -> ArraySpec:
    """The tasks `text` names; raises InvalidRequest (field "array") saying what is wrong."""
    body, _, cap = text.strip().partition("%")
    max_running = 0
    if cap:
        if not cap.isdigit() or int(cap) < 1:
            raise _bad(text, f"%{cap}: the cap after % is a positive count of running tasks")
        max_running = int(cap)
    indices: set[int] = set()
    for part in body.split(","):
        indices.update(_part(text, part.strip()))
        if len(indices) > MAX_ARRAY_TASKS:
            raise _bad(text, f"more than {MAX_ARRAY_TASKS:,} tasks")
    if not indices:
        raise _bad(text, "no task indices")
    return ArraySpec(tuple(sorted(indices)), max_running)


def _part(text: str, part: str) -> range:
    span, _, step_text = part.partition(":")
    first, dash, last = span.partition("-")
    if not first.isdigit() or (dash and not last.isdigit()):
        raise _bad(text, f"{part!r} is not N, N-M or N-M:S")
    low, high = int(first), int(last) if dash else int(first)
    step = 1
    if step_text:
        if not dash or not step_text.isdigit() or int(step_text) < 1:
            raise _bad(text, f"{part!r}: a step goes after a range, as 0-15:4")
        step = int(step_text)
    if high < low:
        raise _bad(text, f"{part!r} runs backwards")
    if high > MAX_TASK_INDEX:
        raise _bad(text, f"task index {high} is above {MAX_TASK_INDEX:,}")
    if (high - low) // step + 1 > MAX_ARRAY_TASKS:
        raise _bad(text, f"more than {MAX_ARRAY_TASKS:,} tasks")
    return range(low, high + 1, step)


def _bad(text: str, why: str) -> InvalidRequest:
    return InvalidRequest(f"--array {text!r}: {why} (e.g. 0-99%8, 1,3,5, 0-15:4)", field="array")
