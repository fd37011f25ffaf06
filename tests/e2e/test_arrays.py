"""Job arrays through the CLI on a real server: `submit --array` prints the array's id, each
task runs with its own job id, `queue` folds the pending tasks into one line (`--array`
expands them), `show`, `hold`, `cancel` and `wait` take the array's id or a task's `A_i`."""

from __future__ import annotations

import json

from tests.e2e.server import ServerProcess, wait_for

# The server fixture's (tests/e2e/conftest.py) options: two declared GPUs.
SERVER_ARGS = ("--gpus", "2", "--cpus", "8", "--kill-grace", "1")


def _rows(server: ServerProcess, *args: str) -> dict[str, list[str]]:
    """`queue`'s rows by their JOBID cell."""
    lines = server.cli("queue", *args).stdout.splitlines()
    assert lines[0].split()[0] == "JOBID"
    return {line.split()[0]: line.split() for line in lines[1:]}


def test_each_task_runs_with_its_own_id_and_wait_takes_the_array(server: ServerProcess) -> None:
    out = server.cli("submit", "--array", "0-5%2", "--", "sh", "-c", "echo $GPUYARD_JOB_ID")
    array_id = int(out.stdout.strip())  # the array's id alone
    assert server.cli("wait", str(array_id), timeout_s=120).returncode == 0
    client = server.client()
    tasks = client.array(array_id)
    assert [t["array_task_id"] for t in tasks] == [0, 1, 2, 3, 4, 5]
    assert [t["state"] for t in tasks] == ["COMPLETED"] * 6
    for task in tasks:
        assert client.log(task["id"]).decode().strip() == str(task["id"])
    shown = json.loads(server.cli("show", f"{array_id}_4", "--json").stdout)
    assert (shown["id"], shown["array_job_id"], shown["array_task_id"]) == (
        array_id + 4, array_id, 4,
    )  # fmt: skip
    listed = json.loads(server.cli("show", str(array_id), "--json").stdout)
    assert [t["array_task_id"] for t in listed] == [0, 1, 2, 3, 4, 5]
    summary = server.cli("show", str(array_id)).stdout
    assert summary.startswith(f"Array {array_id}: 6 tasks (0-5), at most 2 running: 6 COMPLETED")
    assert f"{array_id}_5" in summary


def test_queue_folds_pending_tasks_and_cancel_takes_a_task_or_the_array(
    server: ServerProcess,
) -> None:
    # Each task holds both GPUs: one runs, the others wait.
    out = server.cli("submit", "--array", "0-9%2", "--gpus", "2", "--", "sleep", "300")
    array_id = out.stdout.strip()
    wait_for(lambda: f"{array_id}_0" in _rows(server))
    rows = _rows(server)
    assert rows[f"{array_id}_0"][3] == "RUNNING"
    assert rows[f"{array_id}_[1-9%2]"][3] == "PENDING"
    assert len(rows) == 2  # one line for the running task, one for the nine pending
    expanded = _rows(server, "--array")
    assert sorted(expanded) == sorted(f"{array_id}_{i}" for i in range(10))

    assert server.cli("cancel", f"{array_id}_3").returncode == 0
    assert server.cli("hold", f"{array_id}_5").stdout.startswith(f"job {array_id}_5 held")
    rows = _rows(server)
    assert rows[f"{array_id}_[1-2,4-9%2]"][3] == "PENDING"
    shown = server.cli("show", array_id).stdout
    assert "10 tasks (0-9), at most 2 running: 1 RUNNING, 8 PENDING, 1 CANCELLED" in shown
    task = server.cli("show", f"{array_id}_5").stdout
    assert f"ArrayJobId: {array_id}" in task and "ArrayTaskId: 5" in task
    # The whole array: release lets the held task go, hold keeps every pending task back.
    released = server.cli("release", array_id).stdout
    assert released == f"job {array_id}_5 released\n"
    held = server.cli("hold", f"{array_id}_[1-2,4]").stdout.splitlines()
    assert [line.split()[1] for line in held] == [f"{array_id}_{i}" for i in (1, 2, 4)]
    assert server.cli("release", array_id).stdout.count("released") == 3
    bad = server.cli("cancel", f"{array_id}_42", check=False)
    assert bad.returncode == 1
    assert (
        bad.stderr
        == f"gpuyard: array {array_id} has no task 42: `gpuyard show {array_id}` lists its tasks\n"
    )

    assert server.cli("cancel", array_id).returncode == 0  # the whole array, as scancel
    waited = server.cli("wait", array_id, check=False, timeout_s=60)
    assert waited.returncode == 1  # its tasks were cancelled: not COMPLETED
    assert f"gpuyard: job {array_id}_0 CANCELLED" in waited.stderr
    states = {t["state"] for t in server.client().array(int(array_id))}
    assert states == {"CANCELLED"}
    assert _rows(server) == {}
