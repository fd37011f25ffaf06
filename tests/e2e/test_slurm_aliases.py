"""`gpuyard squeue`, `sacct`, `scancel` against a real server: a Slurm user's habits work."""

from __future__ import annotations

import sys
import time

from tests.e2e.server import ServerProcess, wait_ended, wait_for


def _lines(text: str) -> list[list[str]]:
    return [line.split() for line in text.splitlines()]


def test_squeue_shows_running_and_pending_jobs_in_slurms_columns(server: ServerProcess) -> None:
    big = server.cli("submit", "--gpus", "4", "-J", "blocker", "--", "sleep", "60").stdout.strip()
    wait_for(lambda: server.client().job(int(big))["state"] == "RUNNING")
    waiting = server.cli("submit", "--gpus", "2", "-J", "second", "--", "true").stdout.strip()
    wait_for(lambda: server.client().job(int(waiting))["reason"] == "Resources")

    rows = _lines(server.cli("squeue").stdout)
    assert rows[0] == ["JOBID", "PARTITION", "NAME", "USER", "ST", "TIME", "NODES",
                       "NODELIST(REASON)"]  # fmt: skip
    by_id = {row[0]: row for row in rows[1:]}
    assert by_id[waiting][1:3] == ["gpuyard", "second"] and by_id[waiting][4] == "PD"
    assert by_id[waiting][-1] == "(Resources)"
    node = server.client().job(int(big))["node"]
    assert by_id[big][4] == "R" and by_id[big][-1] == node
    assert [row[0] for row in rows[1:]] == [waiting, big]  # pending first, as squeue sorts

    only = server.cli("squeue", "-h", "-t", "R", "-o", "%i %T %b").stdout.split()
    assert only == [big, "RUNNING", "gres/gpu:4"]
    assert server.cli("squeue", "-h", "-u", "nobody-else").stdout == ""

    assert server.cli("scancel", big, waiting).stdout == ""
    for job in (big, waiting):
        assert wait_ended(server.client(), job)["state"] == "CANCELLED"


def test_sacct_reports_ends_and_exit_codes(server: ServerProcess) -> None:
    ok = server.cli("submit", "-J", "ok", "--", "true").stdout.strip()
    bad = server.cli("submit", "-J", "bad", "--", "sh", "-c", "exit 3").stdout.strip()
    for job in (ok, bad):
        wait_ended(server.client(), job)

    out = server.cli("sacct", "-j", f"{ok},{bad}", "-X", "-P",
                     "--format=JobID,JobName,State,ExitCode").stdout  # fmt: skip
    assert out.splitlines() == [
        "JobID|JobName|State|ExitCode",
        f"{ok}|ok|COMPLETED|0:0",
        f"{bad}|bad|FAILED|3:0",
    ]
    table = server.cli("sacct", "-j", ok).stdout.splitlines()
    assert table[0].split() == ["JobID", "JobName", "Partition", "Account", "AllocCPUS",
                                "State", "ExitCode"]  # fmt: skip
    assert [line.split()[0] for line in table[2:]] == [ok, f"{ok}.batch", f"{ok}.extern"]


def test_sacct_answers_a_workflow_managers_status_query(server: ServerProcess) -> None:
    # Snakemake's Slurm executor polls with exactly this (its run's jobs named by a uuid).
    job = server.cli("submit", "-J", "run-5f2a", "--mem", "3G", "--", "true").stdout.strip()
    wait_ended(server.client(), job)
    since = time.strftime("%Y-%m-%dT%H:00", time.localtime(time.time() - 2 * 86400))
    query = ("sacct", "-X", "--parsable2", "--clusters", "all", "--noheader",
             "--format=JobIdRaw,State", "--starttime", since, "--endtime", "now",
             "--name", "run-5f2a")  # fmt: skip
    assert server.cli(*query).stdout.split() == [f"{job}|COMPLETED"]
    # One cluster here: another's jobs are none; a window that ended before the job, none.
    assert server.cli("sacct", "-M", "elsewhere", "-n", "-X", "-j", job).stdout.strip() == ""
    before = server.cli("sacct", "-n", "-X", "-S", "2020-01-01", "-E", "2020-01-02").stdout
    assert before.strip() == ""
    # Usage fields and steps as Slurm prints them: the job's row leaves MaxRSS to its steps,
    # the allocation's own step (.extern) ran none of the job; no GPU: no energy.
    fields = "JobID,State,ReqMem,MaxRSS,ConsumedEnergy"
    usage = server.cli("sacct", "-j", job, "-P", "--units=M", "-o", fields).stdout
    rows = [line.split("|") for line in usage.splitlines()]
    assert rows[0] == ["JobID", "State", "ReqMem", "MaxRSS", "ConsumedEnergy"]
    assert rows[1] == [job, "COMPLETED", "3072M", "", "0"]
    assert rows[2][:3] == [f"{job}.batch", "COMPLETED", "3072M"] and rows[2][4] == "0"
    assert rows[3] == [f"{job}.extern", "COMPLETED", "3072M", "0", "0"]


# 200 MiB written (so resident, not only reserved) and about a second of CPU.
_USES = "import time\nblock = b'x' * (200 << 20)\nwhile time.process_time() < 1.0:\n    pass\n"


def test_sacct_and_show_give_what_a_jobs_processes_used(server: ServerProcess) -> None:
    """MaxRSS (the largest of its processes) and TotalCPU (all of them), as the kernel
    counted them: a child process's use counts (Slurm gathers every task's)."""
    script = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {_USES!r}])"
    job = server.cli("submit", "--", sys.executable, "-c", script).stdout.strip()
    assert wait_ended(server.client(), job)["state"] == "COMPLETED"
    fields = "JobID,MaxRSS,TotalCPU"
    rows = server.cli("sacct", "-j", job, "-P", "-n", "--units=M", "-o", fields).stdout
    batch = next(r.split("|") for r in rows.splitlines() if r.startswith(f"{job}.batch"))
    rss_mib = float(batch[1].rstrip("M"))
    assert 200 <= rss_mib < 1024, batch
    minutes, seconds = batch[2].split(":")
    assert 0.9 <= int(minutes) * 60 + float(seconds) < 60, batch
    shown = server.cli("show", job).stdout
    assert "peak resident memory" in shown and "of CPU" in shown, shown


def test_scancel_says_what_slurm_says_for_a_job_it_cannot_cancel(server: ServerProcess) -> None:
    done = server.cli("submit", "--", "true").stdout.strip()
    wait_ended(server.client(), done)
    result = server.cli("scancel", done, "999999", check=False)
    assert result.stderr.splitlines() == [
        f"scancel: error: Kill job error on job id {done}: Job/step already completing or "
        "completed",
        "scancel: error: Kill job error on job id 999999: Invalid job id specified",
    ]
    refused = server.cli("scancel", "--signal", "USR1", done, check=False)
    assert refused.returncode == 1 and "gpuyard cancel --signal" in refused.stderr
