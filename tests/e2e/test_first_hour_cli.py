"""The CLI in a new user's first hour (issue 26), against a real server: `A_T` names task T of
array A on every command of one job (never the job whose id its digits spell: Python's
`int("1_2")` is 12), `queue -t COMPLETED` says where finished jobs are, `--version`,
`whoami`, `submit --dry-run --json`, one list of close commands, a file given as a folder,
and `show`'s times with their zone."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

from tests.e2e.server import GPUYARD, ServerProcess, free_port

SERVER_ARGS = ("--gpus", "2", "--cpus", "8", "--kill-grace", "1")


def _fails(server: ServerProcess, *args: str, code: int = 1) -> str:
    """The one line `gpuyard ARGS` answers on stderr when it refuses (usage errors: the
    `Error:` line click ends with)."""
    result = server.cli(*args, check=False)
    assert result.returncode == code, (args, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    return lines[-1] if code == 2 else "\n".join(lines)


def test_a_task_reference_names_the_task_not_the_job_its_digits_spell(
    server: ServerProcess,
) -> None:
    out = server.cli("submit", "--array", "0-3", "--", "sh", "-c", "echo task $SLURM_ARRAY_TASK_ID")
    assert out.stdout.strip() == "1"  # tasks 0-3 are jobs 1-4
    client = server.client()
    others = [int(client.submit(["sh", "-c", f"echo job {n}"])["id"]) for n in range(5, 13)]
    assert others[-1] == 12  # the job `int("1_2")` would name
    assert server.cli("wait", "1", *map(str, others), timeout_s=120).returncode == 0

    assert server.cli("logs", "1_2").stdout == "task 2\n"  # was job 12's log
    assert server.cli("logs", "--tail", "1", "1_3").stdout == "task 3\n"
    again = int(server.cli("restart", "1_3").stdout)  # was: job 13 not found
    assert client.job(again)["restart_of"] == 4  # task 3 is job 4
    assert "job 3 " in _fails(server, "update", "1_2", "--priority", "5")  # task 2, ended
    refused = _fails(server, "attach", "1_2", code=2)
    assert refused.startswith("gpuyard: job 3 is not an interactive session")  # was job 12
    squeue = server.cli("squeue", "-j", "1_[1-2],12", "-t", "all", "-h", "-o", "%i").stdout.split()
    assert squeue == ["1_1", "1_2", "12"]

    for args in (["logs", "1_[1-2]"], ["restart", "1_[0,3]"], ["update", "1_[1-2]", "--gpus", "1"],
                 ["attach", "1_[1-2]"]):  # fmt: skip
        assert "names several tasks: give one job (12) or one task (12_3)" in _fails(
            server, *args, code=2
        )  # fmt: skip
    for args in (["logs", "1_x"], ["logs", "+12"], ["restart", "1__2"], ["logs", "١٢"]):
        assert "is not a job: give a job id (12)" in _fails(server, *args, code=2)
    assert "is an array's task: give a job id (12)" in _fails(
        server, "queue", "--all", "--before", "1_5", code=2
    )  # fmt: skip


def test_a_finished_state_without_all_says_where_finished_jobs_are(server: ServerProcess) -> None:
    server.cli("wait", server.cli("submit", "--", "true").stdout.strip())
    bare = server.cli("ps", "-t", "COMPLETED")
    assert bare.stdout.startswith("JOBID") and bare.stdout.count("\n") == 1  # a header alone
    assert bare.stderr == (
        "gpuyard: hint: COMPLETED jobs have ended, and the queue lists pending and running "
        "ones: add --all for the finished\n"
    )
    listed = server.cli("ps", "-t", "COMPLETED", "--all")
    assert listed.stdout.count("\n") == 2 and listed.stderr == ""
    assert server.cli("ps", "-t", "RUNNING").stderr == ""


def test_version_whoami_and_a_dry_run_in_json(server: ServerProcess) -> None:
    from gpuyard import __version__

    assert server.cli("--version").stdout == f"gpuyard {__version__}\n"
    me = server.client().whoami()
    said = server.cli("whoami").stdout
    assert said == f"{me['user']} (admin, team default; this credential: admin) on {server.url}\n"
    assert json.loads(server.cli("whoami", "--json").stdout) == {**me, "server": server.url}
    answer = json.loads(server.cli("submit", "--dry-run", "--json", "--", "true").stdout)
    assert answer["starts_in_s"] == 0 and "start_at" in answer
    job = json.loads(server.cli("submit", "--json", "--", "true").stdout)
    assert job["state"] in ("PENDING", "RUNNING", "COMPLETED") and job["command"] == ["true"]


def test_an_unknown_command_gets_one_list_of_close_names(server: ServerProcess) -> None:
    said = _fails(server, "shw", "1", code=2)
    assert said == "Error: No such command 'shw'. Did you mean 'show'?"  # once (was twice)
    assert _fails(server, "admin", "usr", code=2).count("Did you mean") == 1


def test_a_file_given_as_a_folder_says_so(server: ServerProcess, tmp_path: Path) -> None:
    file = tmp_path / "notes.txt"
    file.write_text("x")
    refused = _fails(server, "submit", "--workdir", str(file), "--", "true")
    assert f"workdir '{file}' is a file, not a folder on the server" in refused, refused
    for state in (file, file / "state"):
        result = subprocess.run(
            [GPUYARD, "server", "--state-dir", str(state), "--port", str(free_port()),
             "--gpus", "1"],
            capture_output=True, text=True, timeout=60, env=server.cli_env(),
        )  # fmt: skip
        assert result.returncode == 1 and result.stderr.count("\n") == 1, result.stderr
        assert "is a file, not a folder" in result.stderr and str(file) in result.stderr


def test_show_gives_each_time_with_its_zone(server: ServerProcess) -> None:
    job = server.cli("submit", "--", "true").stdout.strip()
    server.cli("wait", job)
    record = dict(
        line.strip().split(": ", 1) for line in server.cli("show", job).stdout.splitlines()
        if ": " in line
    )  # fmt: skip
    zoned = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d")
    for key in ("SubmitTime", "StartTime", "EndTime"):
        assert zoned.fullmatch(record[key]), (key, record[key])  # was without its zone
    assert record["Reason"] == "None" and record["Node"] not in ("", "local")
