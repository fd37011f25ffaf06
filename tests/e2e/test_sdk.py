"""The Python SDK as a submitit user expects it, against a real server and real jobs: typed
records, `wait` with a timeout that raises and failures that raise, Python functions and
`map_array` run as jobs with their results (or their exceptions, with the job's traceback)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gpuyard.client import Job, JobFailed, WaitTimeout
from gpuyard.sdk.functions import RemoteTraceback
from tests.e2e import sdk_functions
from tests.e2e.server import ServerProcess, wait_for

REPO = Path(__file__).resolve().parents[2]


def test_records_are_typed_and_still_read_as_dicts(server: ServerProcess) -> None:
    client = server.client()
    job = client.submit(["sh", "-c", "exit 0"], gpus=1, name="typed")
    assert isinstance(job, Job) and job.id == job["id"] and job.name == "typed"
    done = client.wait(job)  # one job in, its record out
    assert (done.state, done.exit_code, done.ok, done.num_gpus) == ("COMPLETED", 0, True, 1)
    assert len(done.gpus) == 1 and done.node and done.started_at and done.ended_at
    assert done.runtime_s is not None and done.runtime_s >= 0
    assert json.loads(json.dumps(done)) == dict(done)  # still the server's JSON
    assert done.to_schema().state == "COMPLETED"  # the API's own JobOut
    listed = client.jobs(all=True)
    assert [type(j) for j in listed] == [Job] and listed[0].id == job.id


def test_wait_raises_job_failed_for_a_failed_job_and_returns_it_when_asked(
    server: ServerProcess,
) -> None:
    client = server.client()
    ok = client.submit(["true"])
    bad = client.submit(["sh", "-c", "exit 3"], name="broken")
    with pytest.raises(JobFailed) as caught:
        client.wait([ok, bad])
    failed = caught.value
    assert (failed.job.id, failed.state, failed.exit_code) == (bad.id, "FAILED", 3)
    assert failed.reason and f"job {bad.id} (broken) ended FAILED" in str(failed)
    assert [j.state for j in failed.jobs] == ["COMPLETED", "FAILED"]
    records = client.wait([ok.id, bad.id], raise_on_failure=False)
    assert [(j.state, j.exit_code) for j in records] == [("COMPLETED", 0), ("FAILED", 3)]


def test_wait_times_out_with_a_clear_error_and_the_job_runs_on(server: ServerProcess) -> None:
    client = server.client()
    job = client.submit(["sleep", "120"])
    wait_for(lambda: client.job(job.id).state == "RUNNING", timeout_s=60)
    with pytest.raises(WaitTimeout) as caught:
        client.wait(job.id, poll_s=0.1, timeout=0.3)
    assert isinstance(caught.value, TimeoutError)
    assert str(caught.value).startswith(f"job {job.id} still RUNNING after 0.3 s")
    assert [j.id for j in caught.value.jobs] == [job.id]
    assert client.job(job.id).state == "RUNNING"  # a wait that gave up stops nothing
    client.cancel(job.id)
    with pytest.raises(JobFailed, match="CANCELLED"):
        client.wait(job, timeout=60)


def test_a_function_runs_in_a_job_and_returns_its_value(
    server: ServerProcess, tmp_path: Path
) -> None:
    client = server.client()
    handle = client.submit_function(sdk_functions.power, 3, 4, folder=str(tmp_path))
    assert handle.result(timeout=120) == 81
    record = handle.record()
    assert (record.state, record.name) == ("COMPLETED", "power")
    there = client.submit_function(sdk_functions.where_am_i, gpus=1, folder=str(tmp_path))
    seen = there.result(timeout=120)
    assert seen["GPUYARD_JOB_ID"] == str(there.job_id)  # it ran as that job
    assert seen["CUDA_VISIBLE_DEVICES"] == str(there.record().gpus[0])  # on its GPU
    assert seen["pid"] != str(os.getpid())


def test_a_function_s_exception_comes_back_with_the_job_s_traceback(
    server: ServerProcess, tmp_path: Path
) -> None:
    client = server.client()
    handle = client.submit_function(sdk_functions.diverge, 0.5, folder=str(tmp_path))
    with pytest.raises(ValueError, match=r"loss diverged at lr=0.5") as caught:
        handle.result(timeout=120)
    remote = caught.value.__cause__
    assert isinstance(remote, RemoteTraceback)
    assert "sdk_functions.py" in remote.text and 'raise ValueError(f"loss diverged' in remote.text
    assert handle.record().state == "FAILED"  # as the same call would have failed locally
    assert "ValueError: loss diverged at lr=0.5" in handle.log()
    assert isinstance(handle.exception(), ValueError)


def test_a_function_job_that_is_cancelled_raises_job_failed(
    server: ServerProcess, tmp_path: Path
) -> None:
    client = server.client()
    handle = client.submit_function(sdk_functions.nap, 120, folder=str(tmp_path))
    wait_for(lambda: handle.state == "RUNNING", timeout_s=60)
    handle.cancel()
    with pytest.raises(JobFailed) as caught:
        handle.result(timeout=60)
    assert caught.value.state == "CANCELLED" and caught.value.job.id == handle.job_id


def test_map_array_runs_one_array_task_per_item(server: ServerProcess, tmp_path: Path) -> None:
    client = server.client()
    handles = client.map_array(sdk_functions.power, [1, 2, 3, 4], [2, 2, 2, 2],
                               max_running=2, folder=str(tmp_path))  # fmt: skip
    assert [h.result(timeout=180) for h in handles] == [1, 4, 9, 16]
    tasks = client.array(handles[0].job_id)
    assert [t.array_task_id for t in tasks] == [0, 1, 2, 3]
    assert [t.id for t in tasks] == [h.job_id for h in handles]
    assert {t.state for t in tasks} == {"COMPLETED"}
    assert client.map_array(sdk_functions.power, []) == []


def _script(server: ServerProcess, tmp_path: Path, body: str) -> subprocess.CompletedProcess[str]:
    """Run `body` as a user's script (its own `__main__`) with a client of the server."""
    script = tmp_path / "experiment.py"
    script.write_text(textwrap.dedent(body))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)])}
    token = (server.state_dir / "token").read_text().strip()
    return subprocess.run(
        [sys.executable, str(script), server.url, token, str(tmp_path / "calls")],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=240,
    )  # fmt: skip


def test_a_script_s_own_lambda_and_closure_run_through_cloudpickle(
    server: ServerProcess, tmp_path: Path
) -> None:
    pytest.importorskip("cloudpickle")
    ran = _script(
        server,
        tmp_path,
        """
        import sys
        from gpuyard.client import Client

        def scaled(factor):
            return lambda x: x * factor   # a closure of this script: not importable

        client = Client(sys.argv[1], token=sys.argv[2])
        one = client.submit_function(scaled(10), 4, folder=sys.argv[3])
        many = client.map_array(lambda s: s.upper(), ["a", "b"], folder=sys.argv[3])
        print(one.result(timeout=120), [h.result(timeout=120) for h in many])
    """,
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "40 ['A', 'B']"


def test_without_cloudpickle_a_script_s_function_is_refused_in_one_line(
    server: ServerProcess, tmp_path: Path
) -> None:
    ran = _script(
        server,
        tmp_path,
        """
        import sys
        sys.modules["cloudpickle"] = None   # as where cloudpickle is not installed
        from gpuyard.client import Client
        from gpuyard.domain.errors import InvalidRequest
        from tests.e2e.sdk_functions import power

        def local(x):
            return x

        client = Client(sys.argv[1], token=sys.argv[2])
        try:
            client.submit_function(local, 1, folder=sys.argv[3])
        except InvalidRequest as exc:
            print(exc)
        print(client.submit_function(power, 2, 5, folder=sys.argv[3]).result(timeout=120))
    """,
    )
    assert ran.returncode == 0, ran.stderr
    refused, value = ran.stdout.strip().splitlines()
    assert refused == (
        "cannot send __main__.local to a job: it is defined in this script (__main__), which "
        "the job cannot import; move it to a module, or `pip install cloudpickle`"
    )
    assert value == "32"  # an importable function goes by reference with plain pickle
