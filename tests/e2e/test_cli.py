"""The CLI as a user types it: ids on stdout, one-line errors, JSON fields, scripts, logs -f."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from gpuyard.domain.errors import GpuyardError, InvalidRequest
from tests.e2e.server import GPUYARD, ServerProcess, free_port

JOB_FIELDS = {"id", "name", "state", "reason", "gpus", "exit_code", "submitted_at", "started_at",
              "ended_at"}  # fmt: skip
GPU_FIELDS = {"index", "uuid", "name", "memory_total_mib", "detected", "job"}


def test_server_down_gives_one_clear_line(tmp_path: Path):
    url = f"http://127.0.0.1:{free_port()}"
    for args in (["queue"], ["submit", "--", "true"], ["show", "1"], ["gpus", "--json"]):
        result = subprocess.run([GPUYARD, *args], capture_output=True, text=True,
                                env={"GPUYARD_URL": url, "PATH": "/usr/bin:/bin",
                                     "GPUYARD_STATE_DIR": str(tmp_path),
                                     # submit's retries (test_idempotent_submit.py): none
                                     "GPUYARD_SUBMIT_RETRY_S": "0"})  # fmt: skip
        assert result.returncode == 1
        assert result.stderr == (
            f"gpuyard: cannot reach gpuyard server at {url}: is `gpuyard server` running?\n"
        )
        assert "Traceback" not in result.stdout + result.stderr


def test_submit_prints_only_the_id_and_json_has_stable_fields(server: ServerProcess):
    out = server.cli("submit", "--gpus", "1", "--name", "x", "--", "sleep", "0.2").stdout
    assert out.strip().isdigit() and out.endswith("\n") and out.count("\n") == 1
    job_id = out.strip()
    server.cli("wait", job_id)
    shown = json.loads(server.cli("show", job_id, "--json").stdout)
    assert set(shown) >= JOB_FIELDS and shown["state"] == "COMPLETED" and len(shown["gpus"]) == 1
    listed = json.loads(server.cli("queue", "--all", "--json").stdout)
    assert [j["id"] for j in listed] == [int(job_id)] and set(listed[0]) >= JOB_FIELDS
    assert json.loads(server.cli("ps", "--json").stdout) == []
    gpus = json.loads(server.cli("gpus", "--json").stdout)
    assert len(gpus) == 4 and all(set(g) >= GPU_FIELDS for g in gpus)
    assert {g["detected"] for g in gpus} == {False}


def test_queue_and_show_are_readable(server: ServerProcess):
    running = server.cli("submit", "--gpus", "4", "--name", "big", "--", "sleep", "30").stdout
    waiting = server.cli("submit", "--gpus", "1", "--name", "small", "--", "true").stdout
    table = server.cli("queue").stdout.splitlines()
    assert table[0].split()[:4] == ["JOBID", "NAME", "USER", "STATE"]
    assert "RUNNING" in table[1] and "0,1,2,3" in table[1]
    assert "PENDING" in table[2] and "(Resources)" in table[2]
    shown = server.cli("show", waiting.strip()).stdout
    assert "State: PENDING" in shown and "Reason: Resources" in shown
    server.cli("cancel", running.strip(), waiting.strip())


def test_bad_input_on_the_command_line_is_one_line(server: ServerProcess, tmp_path: Path):
    cases = [
        (["submit", "--gpus", "9", "--", "true"], "asks for 9 GPUs but this server has 4"),
        (["submit", "--mem", "lots", "--", "true"], "bad size 'lots'"),
        (["submit", "--time", "soon", "--", "true"], "bad duration 'soon'"),
        (["submit", "--workdir", str(tmp_path / "nope"), "--", "true"], "does not exist"),
        (["submit", "--env", "NOEQUALS", "--", "true"], "--env 'NOEQUALS': use KEY=VALUE"),
        (["show", "424242"], "job 424242 not found"),
        (["logs", "424242"], "job 424242 not found"),
    ]
    for args, expected in cases:
        result = server.cli(*args, check=False)
        assert result.returncode == 1, args
        assert expected in result.stderr and result.stderr.count("\n") == 1, result.stderr
        assert "Traceback" not in result.stderr
    assert json.loads(server.cli("queue", "--all", "--json").stdout) == []
    usage = server.cli("submit", check=False)
    assert usage.returncode == 2 and "Traceback" not in usage.stderr


def test_script_file_runs_with_its_interpreter(server: ServerProcess, tmp_path: Path):
    script = tmp_path / "job.sh"
    script.write_text('#!/bin/sh\necho "script ran in $(pwd) with $1"\n')  # not executable
    job_id = server.cli("submit", "job.sh", "arg1", cwd=tmp_path).stdout.strip()
    server.cli("wait", job_id)
    assert server.cli("logs", job_id).stdout == f"script ran in {tmp_path} with arg1\n"
    assert server.client().job(int(job_id))["name"] == "job.sh"


def test_logs_follow_streams_until_the_job_ends(server: ServerProcess):
    loop = "for i in 1 2 3; do echo step $i; sleep 0.3; done"
    job_id = server.cli("submit", "--", "sh", "-c", loop).stdout.strip()
    followed = server.cli("logs", "-f", job_id)
    assert followed.stdout == "step 1\nstep 2\nstep 3\n"
    assert server.client().job(int(job_id))["state"] == "COMPLETED"


def test_wait_exit_status_is_zero_only_if_all_completed(server: ServerProcess):
    ok = server.cli("submit", "--", "true").stdout.strip()
    bad = server.cli("submit", "--", "false").stdout.strip()
    assert server.cli("wait", ok).returncode == 0
    result = server.cli("wait", ok, bad, check=False)
    assert result.returncode == 1 and f"job {bad} FAILED" in result.stderr


def _sdk_error(server: ServerProcess, command: list[str], **fields: object) -> GpuyardError:
    with pytest.raises(GpuyardError) as caught:
        server.client().submit(command, **fields)
    return caught.value


def test_a_spec_rule_answers_the_same_through_the_cli_and_the_sdk(server: ServerProcess):
    cases = [
        (["--nodes", "2", "--gpus", "3"], {"nodes": 2, "gpus": 3}),
        (["--distributed", "torchrun"], {"distributed": "torchrun"}),
        (["--nodes", "2", "--gpus", "2", "--gpu-mem", "8G"],
         {"nodes": 2, "gpus": 2, "gpu_mem": "8G"}),
        # No --gpus: both mean one GPU, which this server (no GPU memory declared) refuses.
        (["--gpu-mem", "8G"], {"gpu_mem": "8G"}),
    ]  # fmt: skip
    for cli_args, sdk_fields in cases:
        cli = server.cli("submit", *cli_args, "--", "true", check=False)
        sdk = _sdk_error(server, ["true"], **sdk_fields)
        assert cli.returncode == 1 and cli.stderr == f"gpuyard: {sdk.message}\n", cli_args
        assert isinstance(sdk, InvalidRequest) and sdk.field
    assert server.client().jobs(all=True) == []


def test_the_client_sends_its_working_directory_and_the_server_names_the_job(
    server: ServerProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.chdir(tmp_path)
    by_sdk = server.client().submit(["pwd"])
    by_cli = int(server.cli("submit", "--", "pwd", cwd=tmp_path).stdout)
    server.cli("wait", str(by_sdk["id"]), str(by_cli))
    for job_id in (by_sdk["id"], by_cli):
        job = server.client().job(job_id)
        assert (job["workdir"], job["name"]) == (str(tmp_path), "pwd")
        assert server.cli("logs", str(job_id)).stdout == f"{tmp_path}\n"


def test_an_oversized_command_line_is_refused_at_submit_in_one_line(server: ServerProcess):
    big = ["x" * (100 * 1024), "y" * (100 * 1024)]  # each fits exec; together over the limit
    result = server.cli("submit", "--", "echo", *big, check=False)
    assert result.returncode == 1 and result.stderr.count("\n") == 1, result.stderr
    assert "bytes of arguments, at most 131,072" in result.stderr
    token = (server.state_dir / "token").read_text().strip()
    body = json.dumps({"command": ["echo", "z" * (200 * 1024)], "workdir": "/"}).encode()
    request = urllib.request.Request(
        f"{server.url}/api/v1/jobs", data=body, method="POST",
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )  # fmt: skip
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(request, timeout=10)
    assert caught.value.code == 422
    error = json.loads(caught.value.read())["error"]
    assert error["field"] == "command" and "\n" not in error["message"]
    assert len(error["message"]) < 200  # the argument is not echoed back
    assert server.client().jobs(all=True) == []


def test_the_ray_backend_without_ray_says_how_to_install_it(tmp_path: Path):
    # Ray is an extra (gpuyard[ray]); hide it as if it were not installed.
    hide_ray = (
        "import sys; sys.modules['ray'] = None; "
        f"sys.argv = ['gpuyard', 'server', '--backend', 'ray', '--port', '{free_port()}', "
        f"'--state-dir', {str(tmp_path / 'state')!r}]; "
        "from gpuyard.cli.main import main; main()"
    )
    result = subprocess.run([sys.executable, "-c", hide_ray], capture_output=True, text=True,
                            timeout=60)  # fmt: skip
    assert result.returncode == 1, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("gpuyard: ") and "pip install 'gpuyard[ray]'" in last
    assert "Traceback" not in result.stderr
