"""squeue's and sacct's layouts: what a Slurm user's eyes and scripts expect, column for column."""

from __future__ import annotations

from typing import Any

import pytest
import typer

from gpuyard.cli.slurm_format import (
    SACCT_DEFAULT,
    SQUEUE_DEFAULT,
    compress_indices,
    exit_code,
    fold_arrays,
    sacct_columns,
    sacct_text,
    squeue_text,
    with_steps,
)


def job(id: int, state: str = "RUNNING", **fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "id": id, "name": "train", "owner": "alice", "state": state, "display_state": state,
        "reason": "None", "runtime_s": 75.0, "time_limit_s": 7200, "nodes": 1, "cpus": 4,
        "num_gpus": 2, "mem_mib": 16384, "node": "local", "priority": 0, "exit_code": None,
        "submitted_at": "2026-12-01T10:00:00+00:00", "started_at": "2026-12-01T10:00:05+00:00",
        "ended_at": None, "array_job_id": None, "array_task_id": None, "array_max_running": 0,
    }  # fmt: skip
    return {**base, **fields}


def test_squeue_default_columns_are_slurms() -> None:
    text = squeue_text([job(12), job(13, "PENDING", reason="Resources", runtime_s=None)])
    assert text.splitlines() == [
        "             JOBID PARTITION     NAME     USER ST       TIME  NODES NODELIST(REASON)",
        "                12   gpuyard    train    alice  R       1:15      1 local",
        "                13   gpuyard    train    alice PD       0:00      1 (Resources)",
    ]
    assert SQUEUE_DEFAULT == "%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R"


def test_squeue_format_widths_cut_and_justify_like_slurm() -> None:
    long = job(7, name="a-very-long-job-name")
    assert squeue_text([long], "%.5i|%6j|%.9u|%4u|%T|%l", header=False) == (
        "    7|a-very|    alice|alic|RUNNING|2:00:00"
    )
    with pytest.raises(typer.BadParameter, match="%y is not a field"):
        squeue_text([long], "%y")


def test_pending_array_tasks_fold_into_one_line_with_the_cap() -> None:
    tasks = [job(20 + i, "PENDING", reason="JobArrayTaskLimit", array_job_id=20,
                 array_task_id=i, array_max_running=2) for i in (2, 3, 4, 6)]  # fmt: skip
    running = [job(20, array_job_id=20, array_task_id=0, array_max_running=2),
               job(21, array_job_id=20, array_task_id=1, array_max_running=2)]  # fmt: skip
    rows = squeue_text(fold_arrays([*tasks, *running]), "%i %t %R", header=False).splitlines()
    assert rows == ["20_[2-4,6%2] PD (JobArrayTaskLimit)", "20_0 R local", "20_1 R local"]
    assert compress_indices([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8"


def test_sacct_default_table_has_slurms_header_and_steps() -> None:
    done = job(5, "COMPLETED", exit_code=0, ended_at="2026-12-01T10:05:00+00:00")
    text = sacct_text(with_steps([done]), sacct_columns(SACCT_DEFAULT))
    assert text.splitlines() == [
        "JobID           JobName  Partition    Account  AllocCPUS      State ExitCode ",
        "------------ ---------- ---------- ---------- ---------- ---------- -------- ",
        "5                 train    gpuyard                     4  COMPLETED      0:0 ",
        "5.batch           batch                                4  COMPLETED      0:0 ",
    ]


def test_sacct_parsable_formats_and_exit_codes() -> None:
    killed = job(9, "FAILED", exit_code=137, reason="Signal: killed by SIGKILL",
                 array_job_id=8, array_task_id=1, runtime_s=3725.0)  # fmt: skip
    failed = job(10, "FAILED", exit_code=3, reason="NonZeroExitCode: exited with code 3")
    columns = sacct_columns("JobID,JobIDRaw,State,ExitCode,Elapsed")
    assert sacct_text([killed, failed], columns, delimiter="|").splitlines() == [
        "JobID|JobIDRaw|State|ExitCode|Elapsed",
        "8_1|9|FAILED|0:9|01:02:05",
        "10|10|FAILED|3:0|00:01:15",
    ]
    assert sacct_text([failed], columns, header=False, delimiter="|", trailing=True) == (
        "10|10|FAILED|3:0|00:01:15|"
    )
    assert exit_code(job(1, "PENDING")) == "0:0"


def test_sacct_field_widths_and_unknown_fields() -> None:
    assert sacct_columns("jobname%30,State") == [("jobname", 30), ("state", 10)]
    long = job(3, "COMPLETED", name="x" * 14, exit_code=0)
    assert sacct_text([long], sacct_columns("JobName"), header=False) == "xxxxxxxxx+ "
    with pytest.raises(typer.BadParameter, match="MaxVMSize is not a field"):
        sacct_columns("JobID,MaxVMSize")
