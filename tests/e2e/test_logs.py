"""`gpuyard logs` as a user meets it: a big log streamed in bounded memory, `--tail`, a log
that is gone or not a file, and `logs -f` across a server restart."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

from tests.e2e.server import GPUYARD, ServerProcess, wait_for

# Runs one command and prints its peak RSS (KiB): the CLI's memory, apart from the test's.
_PEAK_RSS = (
    "import resource, subprocess, sys\n"
    "with open(sys.argv[1], 'wb') as out:\n"
    "    code = subprocess.run(sys.argv[2:], stdout=out).returncode\n"
    "print(code, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
)


def _submit(server: ServerProcess, script: str) -> int:
    return int(server.cli("submit", "--", "sh", "-c", script).stdout)


def _finished(server: ServerProcess, script: str) -> int:
    job_id = _submit(server, script)
    server.cli("wait", str(job_id))
    return job_id


def _logs_peak_rss_kib(server: ServerProcess, job_id: int, out: Path) -> int:
    result = subprocess.run(
        [sys.executable, "-c", _PEAK_RSS, str(out), GPUYARD, "logs", str(job_id)],
        capture_output=True, text=True, env=server.cli_env(), check=True,
    )  # fmt: skip
    code, peak_kib = map(int, result.stdout.split())
    assert code == 0, result.stderr
    return peak_kib


def test_a_big_log_streams_through_the_cli_in_bounded_memory(server: ServerProcess, tmp_path):
    mib = 64
    big = _finished(server, f"head -c {mib << 20} /dev/zero | tr '\\0' x")
    small = _finished(server, "echo small")
    baseline_kib = _logs_peak_rss_kib(server, small, tmp_path / "small")
    peak_kib = _logs_peak_rss_kib(server, big, tmp_path / "big")
    assert (tmp_path / "big").stat().st_size == mib << 20
    assert (tmp_path / "big").read_bytes() == b"x" * (mib << 20)
    # The whole log in memory (and a copy to join it) would be 2 x 64 MiB over the baseline.
    assert peak_kib - baseline_kib < 24 << 10, (baseline_kib, peak_kib)
    pieces = list(server.client().log_chunks(big))
    assert len(pieces) > 8 and max(map(len, pieces)) <= 1 << 20
    assert server.client().log(big, offset=(mib << 20) - 3) == b"xxx"


def test_logs_tail_prints_the_last_lines(server: ServerProcess):
    job_id = str(_finished(server, "seq 1 100000"))
    assert server.cli("logs", "--tail", "3", job_id).stdout == "99998\n99999\n100000\n"
    assert server.cli("logs", "-n", "1", job_id).stdout == "100000\n"
    assert server.cli("logs", "-n", "0", job_id).stdout == ""
    assert server.cli("logs", "-n", "200000", job_id).stdout.count("\n") == 100000
    assert server.cli("logs", "-f", "-n", "2", job_id).stdout == "99999\n100000\n"
    no_final_newline = _finished(server, "printf 'a\\nb\\nc'")
    assert server.client().log(no_final_newline, tail=2) == b"b\nc"
    bad = server.cli("logs", "-n", "-1", job_id, check=False)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr


def _status_of(server: ServerProcess, path: str) -> tuple[int, dict[str, object]]:
    token = (server.state_dir / "token").read_text().strip()
    req = urllib.request.Request(server.url + path, headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, {}
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_a_log_that_is_gone_or_not_a_file_is_one_line_and_a_4xx(server: ServerProcess):
    job_id = _finished(server, "echo out")
    log = Path(server.client().job(job_id)["log_path"])
    log.unlink()
    gone = server.cli("logs", str(job_id), check=False)
    assert gone.returncode == 1 and gone.stdout == ""
    assert gone.stderr == (
        f"gpuyard: job {job_id}'s log {log} is not on the server any more (deleted?), so its "
        "output is lost\n"
    )
    assert _status_of(server, f"/api/v1/jobs/{job_id}/log")[0] == 404
    log.mkdir()
    not_a_file = server.cli("logs", str(job_id), check=False)
    assert not_a_file.returncode == 1
    assert not_a_file.stderr.startswith(f"gpuyard: job {job_id}'s log {log} cannot be read (a ")
    assert not_a_file.stderr.count("\n") == 1 and "Traceback" not in not_a_file.stderr
    for path in (f"/api/v1/jobs/{job_id}/log", f"/api/v1/jobs/{job_id}/log?follow=true"):
        status, body = _status_of(server, path)
        assert status == 409 and "a directory, not a file" in json.dumps(body)
    # A job that never ran has an empty log, not an error.
    shutil.rmtree(log)
    running = server.cli("submit", "--gpus", "4", "--", "sleep", "60").stdout.strip()
    pending = server.cli("submit", "--gpus", "4", "--", "true").stdout.strip()
    assert server.cli("logs", pending).stdout == ""
    server.cli("cancel", running, pending)


def test_logs_follow_goes_on_across_a_server_restart(server: ServerProcess):
    job_id = _submit(server, "for i in $(seq 1 50); do echo line $i; sleep 0.25; done")
    # Unbuffered: `readline` then takes exactly one line from the pipe. Buffered, a second
    # line that arrived with the first would sit in the reader's buffer, which `communicate`
    # (reading the pipe itself) never sees: the test lost "line 2" when they came together.
    follower = subprocess.Popen(
        [GPUYARD, "logs", "-f", str(job_id)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env=server.cli_env(), bufsize=0,
    )  # fmt: skip
    assert follower.stdout is not None
    assert follower.stderr is not None
    first = follower.stdout.readline()
    assert first == b"line 1\n"
    logged_before = server.log.read_text()
    assert server.proc is not None
    server.proc.terminate()  # as `server.stop()`, without its 10 s before a SIGKILL
    server.proc.wait(timeout=120)
    # A normal stop with a follower connected is no error in the server's log (it used to
    # wait 5 s, then log "ERROR: Cancel 1 running task(s), timeout graceful shutdown exceeded").
    stop_said = server.log.read_text()[len(logged_before) :]
    assert server.proc.returncode in (0, -signal.SIGTERM), stop_said
    assert "ERROR" not in stop_said and "Traceback" not in stop_said, stop_said
    # Restarted once the follower has seen it go (what the test means, however long it took).
    lost = follower.stderr.readline()
    assert lost == b"gpuyard: the server went away; following again once it is back\n"
    server.start(timeout_s=120)
    out, err = follower.communicate(timeout=120)
    assert follower.returncode == 0, err
    assert (first + out).decode() == "".join(f"line {i}\n" for i in range(1, 51))
    assert err == b""
    wait_for(lambda: server.client().job(job_id)["state"] == "COMPLETED", timeout_s=120)


def test_logs_piped_gives_the_raw_bytes_and_rendered_what_a_terminal_shows(
    server: ServerProcess,
) -> None:
    job_id = _finished(server, "printf 'start\\n 10%%|#\\r 60%%|###\\r100%%|#####\\ndone\\n'")

    def logs(*args: str) -> bytes:  # bytes: text mode would read each \r as a line end
        return subprocess.run([GPUYARD, "logs", *args, str(job_id)], capture_output=True,
                              env=server.cli_env(), check=True).stdout  # fmt: skip

    assert logs() == b"start\n 10%|#\r 60%|###\r100%|#####\ndone\n"  # every frame, as written
    assert logs("--rendered") == logs("-f", "--rendered") == b"start\n100%|#####\ndone\n"
    told = " ".join(server.cli("logs", "--help").stdout.split())
    assert "raw bytes" in told and "--rendered" in told
