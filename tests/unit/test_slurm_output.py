"""squeue's and sacct's layouts: what a Slurm user's eyes and scripts expect, column for column."""

from __future__ import annotations

import time
from typing import Any

import pytest
import typer

from gpuyard.cli.slurm_format import (
    SACCT_DEFAULT,
    SQUEUE_DEFAULT,
    compress_indices,
    convert_units,
    cpu_clock,
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
        "5.extern         extern                                4  COMPLETED      0:0 ",
    ]


def test_sacct_steps_as_slurm_prints_them_for_a_job_killed_at_its_limit() -> None:
    # Slurm: the job TIMEOUT 0:0, its batch step killed by SIGTERM (CANCELLED 0:15), the
    # allocation's extern step COMPLETED; a running job's extern step runs with it.
    late = job(6, "TIMEOUT", exit_code=None, reason="TimeLimit", array_job_id=4, array_task_id=2)
    rows = sacct_text(with_steps([late, job(7)]), sacct_columns("JobID,JobName,State,ExitCode"),
                      header=False, delimiter="|").splitlines()  # fmt: skip
    assert rows == ["4_2|train|TIMEOUT|0:0", "4_2.batch|batch|CANCELLED|0:15",
                    "4_2.extern|extern|COMPLETED|0:0", "7|train|RUNNING|0:0",
                    "7.batch|batch|RUNNING|0:0", "7.extern|extern|RUNNING|0:0"]  # fmt: skip


def test_sacct_usage_fields_with_and_without_figures() -> None:
    # MaxRSS is its steps' (blank on the job's row); a figure the server did not record is
    # Slurm's unknown: 0, TotalCPU 00:00:00; ConsumedEnergy the job's GPU energy in joules.
    measured = job(8, "COMPLETED", exit_code=0, max_rss_kib=2097152, cpu_time_s=61.5,
                   gpu_stats={"energy_j": 5266.0})  # fmt: skip
    columns = sacct_columns("JobID,MaxRSS,TotalCPU,ConsumedEnergy,ConsumedEnergyRaw,ReqMem")
    assert sacct_text(with_steps([measured, job(9)]), columns, header=False,
                      delimiter="|").splitlines() == [
        "8||01:01.500|5266|5266|16G",
        "8.batch|2G|01:01.500|5266|5266|16G",
        "8.extern|0|00:00:00|0|0|16G",
        "9||00:00:00|0|0|16G",
        "9.batch|0|00:00:00|0|0|16G",
        "9.extern|0|00:00:00|0|0|16G",
    ]  # fmt: skip
    by_unit = [sacct_text(with_steps([measured])[1:2], sacct_columns("MaxRSS,ReqMem"),
                          header=False, delimiter="|", units=units) for units in "KMG"]  # fmt: skip
    assert by_unit == ["2097152K|16777216K", "2048M|16384M", "2G|16G"]
    assert sacct_text([measured], sacct_columns("ReqMem"), header=False, units="") == (
        "    16384M "
    )  # --noconvert


def test_sacct_converts_as_slurm_only_without_losing_precision() -> None:
    assert convert_units(5266672, 1, None) == "5266672K"  # what real sacct prints
    assert convert_units(10452, 1, None) == "10452K"
    assert convert_units(3 * 1024 * 1024, 1, None) == "3G"
    assert convert_units(1536, 2, "G") == "1.50G"
    assert convert_units(0, 1, "M") == "0"
    assert convert_units(1_250_000, 0, None, 1000) == "1250K"  # energy: joules, by 1000s
    assert cpu_clock(0) == "00:00:00" and cpu_clock(1.234) == "00:01.234"
    assert cpu_clock(3725) == "01:02:05" and cpu_clock(93784) == "1-02:03:04"


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


def test_sacct_times_in_slurms_forms() -> None:
    from gpuyard.cli.slurm_queries_cmd import slurm_time

    now = time.time()
    assert abs(slurm_time("now", "-E") - now) < 5
    assert abs(slurm_time("now-2days", "-S") - (now - 2 * 86400)) < 5
    assert abs(slurm_time("NOW+1hour", "-E") - (now + 3600)) < 5
    noon = slurm_time("noon", "-S")
    assert time.localtime(noon)[3:6] == (12, 0, 0) and slurm_time("12:00", "-S") == noon
    assert slurm_time("2026-11-30T18:00", "-S") == time.mktime((2026, 11, 30, 18, 0, 0, 0, 0, -1))
    assert slurm_time("11/30/26", "-S") == time.mktime((2026, 11, 30, 0, 0, 0, 0, 0, -1))
    with pytest.raises(typer.BadParameter, match="give YYYY-MM-DD"):
        slurm_time("yesterday-ish", "--endtime")
    with pytest.raises(typer.BadParameter, match="the unit is"):
        slurm_time("now-3fortnights", "-E")
