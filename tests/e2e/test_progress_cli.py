"""The terminal's progress (issue 14) as a user meets it, against a real server: a job that
prints `::gpuyard progress` lines; `show`'s Progress line and sparklines, `wait` and `logs -f`
on a terminal (a pseudo-terminal the test reads) drawing a bar with ETA, and piped `wait` and
`logs -f` printing exactly what they did before (scripts parse them)."""

from __future__ import annotations

import fcntl
import io
import os
import pty
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuyard.cli import commands, live
from gpuyard.client import Client
from gpuyard.domain.errors import NotFound
from tests.e2e.server import GPUYARD, ServerProcess, wait_for
from tests.fakenvml import build_fake_nvml, fake_nvml_env, gcc_path, write_fake_nvml_state

ANSI = re.compile(rb"\x1b\[[0-9;?]*[A-Za-z]")


def trainer(steps: int, pause_s: float, extra: str = "") -> list[str]:
    """A job printing the stdout protocol: step, total, a falling loss and an accuracy."""
    code = (
        "import time\n"
        f"for i in range(1, {steps} + 1):\n"
        f"    print(f'::gpuyard progress step={{i}} total={steps} loss={{2 / i:.4f}} "
        "acc={i / 100:.2f}', flush=True)\n"
        f"    time.sleep({pause_s})\n"
        f"{extra}"
    )
    return [sys.executable, "-c", code]


def submit(server: ServerProcess, argv: list[str], *options: str) -> int:
    return int(server.cli("submit", *options, "--", *argv).stdout)


def on_terminal(
    server: ServerProcess,
    out: Path,
    *args: str,
    stdout_too: bool = False,
    timeout_s: float = 90,
    interrupt_on: bytes | None = None,
) -> tuple[int, bytes]:
    """Run `gpuyard ARGS` with stderr (and with `stdout_too` stdout) on a pseudo-terminal of
    120 columns the test reads; stdout otherwise to the file `out`. (exit code, what the
    terminal got). `interrupt_on`: once the terminal shows this, Ctrl-C (SIGINT)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    env = {**server.cli_env(), "TERM": "xterm-256color"}
    with open(out, "wb") as sink:
        proc = subprocess.Popen(
            [GPUYARD, *args], stdin=subprocess.DEVNULL, stdout=slave if stdout_too else sink,
            stderr=slave, env=env,
        )  # fmt: skip
    os.close(slave)
    seen = bytearray()
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.1)
            if ready:
                try:
                    data = os.read(master, 65536)
                except OSError:  # EIO: every end of the terminal's other side is closed
                    break
                if not data:
                    break
                seen += data
                if interrupt_on is not None and interrupt_on in ANSI.sub(b"", bytes(seen)):
                    proc.send_signal(signal.SIGINT)
                    interrupt_on = None
        return proc.wait(timeout=max(1.0, deadline - time.monotonic())), bytes(seen)
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()


# -- show ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def nvml_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if gcc_path() is None:
        pytest.skip("gcc is needed to build fake NVML")
    return build_fake_nvml(tmp_path_factory.mktemp("nvml"))


@pytest.fixture
def gpu_server(tmp_path: Path, nvml_dir: Path) -> Iterator[ServerProcess]:
    """A server with two GPUs from the fake NVML, busy at 83%, sampled every 0.2 s."""
    state = tmp_path / "nvml_state"
    busy = {"util_gpu": 83, "util_mem": 40, "mem_used_mib": 5000, "temp_c": 71,
            "power_mw": 300000}  # fmt: skip
    write_fake_nvml_state(state, {0: busy, 1: busy})
    gpus = [("NVIDIA H200", 143771, f"GPU-0000000{i}-aaaa-bbbb-cccc-000000000000")
            for i in range(2)]  # fmt: skip
    env = fake_nvml_env(nvml_dir, gpus=gpus, state=state, GPUYARD_TELEMETRY_S="0.2")
    srv = ServerProcess(tmp_path / "state", env=env).start()
    yield srv
    srv.stop()
    srv.kill_jobs()


def test_show_prints_the_progress_line_and_sparklines_of_loss_and_gpu_use(gpu_server):
    job_id = submit(gpu_server, trainer(40, 0.1), "--gpus", "1")
    gpu_server.cli("wait", str(job_id))

    def charted() -> str | None:
        out = gpu_server.cli("show", str(job_id)).stdout
        done = "Progress: 40/40 (100%)" in out  # the last lines are read after the end
        return out if done and "LossCurve:" in out and "GpuUtilCurve:" in out else None

    record = {
        line.split(":", 1)[0].strip(): line.split(":", 1)[1].strip()
        for line in wait_for(charted, timeout_s=30).splitlines()
        if ":" in line
    }
    assert record["Progress"].startswith("40/40 (100%)")
    assert "loss=0.05 acc=0.4" in record["Progress"]
    # The series has a point per second the server read (the reports of one read merged).
    cells = r"(?:, each cell a mean of ~?\d+ points)?"  # a series longer than the line
    match = re.fullmatch(rf"(\S+) min (\S+) max (\S+) \(loss{cells}\)", record["LossCurve"])
    assert match, record["LossCurve"]
    curve, low, high = match.groups()
    assert curve[0] == "█" and curve[-1] == "▁" and set(curve) <= set("▁▂▃▄▅▆▇█")
    assert 0.05 <= float(low) < float(high) <= 2
    util = record["GpuUtilCurve"]
    assert util.endswith("max 83% (GPU " + util.rsplit("(GPU ", 1)[1])
    assert set(util.split()[0]) <= set("▁▂▃▄▅▆▇█")


def test_show_of_a_job_without_progress_or_gpus_adds_nothing(server: ServerProcess):
    job_id = submit(server, ["echo", "hi"])
    server.cli("wait", str(job_id))
    out = server.cli("show", str(job_id)).stdout
    assert "Progress" not in out and "Curve" not in out and "RunTime:" in out


# -- an older server ---------------------------------------------------------------------------
class OlderServer(Client):
    """A client of a server that predates the progress and history routes: it asks paths
    this server has no route for, as the real routes are absent on an older server."""

    def progress(self, job_id: int) -> dict[str, object] | None:
        return self._optional(f"/api/v1/jobs/{job_id}/progress-of-a-newer-server")

    def series(self, job_id: int, names: object, max_points: int = 500) -> None:
        raise AssertionError("no series is asked without progress")

    def job_gpu_history(self, job_id: int, max_points: int = 600) -> dict[str, object] | None:
        return self._optional(f"/api/v1/jobs/{job_id}/gpu-history-of-a-newer-server")


def test_an_older_server_without_the_routes_leaves_show_and_wait_as_they_were(
    server: ServerProcess, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):
    token = (server.state_dir / "token").read_text().strip()
    job_id = submit(server, trainer(20, 0.05), "--gpus", "1")
    older = OlderServer(server.url, token=token)
    monkeypatch.setattr(commands, "client", lambda: older)
    frames = io.StringIO()
    monkeypatch.setattr(sys, "stderr", frames)
    (job,) = live.wait_live(older, [job_id])
    assert job["state"] == "COMPLETED"
    drawn = frames.getvalue()
    assert f"job {job_id}" in drawn and "✓" in drawn and "━" not in drawn  # spinner, no bar
    capsys.readouterr()
    assert commands.show(str(job_id), False) == 0
    shown = capsys.readouterr().out
    assert "RunTime:" in shown and "Progress" not in shown and "Curve" not in shown


def test_a_missing_route_is_none_and_a_missing_job_is_not_found(server: ServerProcess):
    client = server.client()
    assert client._optional("/api/v1/jobs/1/no-such-route") is None
    for ask in (client.progress, client.job_gpu_history):
        with pytest.raises(NotFound, match="job 424242 not found"):
            ask(424242)
    with pytest.raises(NotFound, match="job 424242 not found"):
        client.series(424242, ["loss"])


# -- wait and logs -f on a terminal ----------------------------------------------------------
def test_wait_on_a_terminal_draws_a_bar_with_eta_and_metrics(server: ServerProcess, tmp_path):
    job_id = submit(server, trainer(100, 0.05))
    code, terminal = on_terminal(server, tmp_path / "out", "wait", str(job_id))
    assert code == 0
    assert (tmp_path / "out").read_bytes() == b""  # stdout stays clean
    text = ANSI.sub(b"", terminal).decode()
    assert f"job {job_id}" in text and "━" in text
    eta = re.findall(r"(\d+)/100 \((\d+)%\)  [\d.]+ (?:steps/s|s/step)  ETA \d+:\d\d", text)
    assert eta, text[-2000:]  # a bar mid-way, with its rate and ETA
    assert "loss=" in text and "acc=" in text
    assert "✓" in text and "COMPLETED" in text  # the last frame
    assert terminal.endswith(b"\n\x1b[?25h")  # left on a fresh line, the cursor shown


def test_wait_quiet_on_a_terminal_prints_what_it_always_did(server: ServerProcess, tmp_path):
    job_id = submit(server, trainer(5, 0.05, "raise SystemExit(3)\n"))
    code, terminal = on_terminal(server, tmp_path / "out", "wait", "--quiet", str(job_id))
    assert code == 1
    assert terminal.replace(b"\r\n", b"\n") == (
        f"gpuyard: job {job_id} FAILED: NonZeroExitCode: exited with code 3\n".encode()
    )


def test_logs_follow_with_stdout_piped_keeps_the_log_byte_for_byte(server, tmp_path):
    job_id = submit(server, trainer(60, 0.05, "print('done \\x1b[1mbold\\x1b[0m')\n"))
    code, terminal = on_terminal(server, tmp_path / "out", "logs", "-f", str(job_id))
    assert code == 0
    log = (tmp_path / "out").read_bytes()
    assert log == server.client().log(job_id)
    assert log.count(b"::gpuyard progress") == 60 and log.endswith(b"done \x1b[1mbold\x1b[0m\n")
    text = ANSI.sub(b"", terminal).decode()
    assert f"job {job_id}" in text and "/60 (" in text  # the bar, on the terminal only
    assert terminal.endswith(b"\x1b[?25h")


def test_logs_follow_on_the_same_terminal_keeps_every_line_above_the_bar(server, tmp_path):
    job_id = submit(server, trainer(60, 0.05))
    code, terminal = on_terminal(server, tmp_path / "out", "logs", "-f", str(job_id),
                                 stdout_too=True)  # fmt: skip
    assert code == 0
    # What the terminal shows of each line: what follows its last carriage return (the bar
    # drawn there before was erased by it), without colours.
    lines = terminal.replace(b"\r\n", b"\n").split(b"\n")  # the terminal's own line ends
    shown = [ANSI.sub(b"", line.rsplit(b"\r", 1)[-1]) for line in lines]
    log = [line for line in shown if b"::gpuyard progress" in line]
    assert len(log) == 60 and all(line.startswith(b"::gpuyard progress step=") for line in log)
    assert [int(line.split(b"=")[1].split()[0]) for line in log] == list(range(1, 61))
    bars = [line for line in terminal.split(b"\n") if b"/60 (" in ANSI.sub(b"", line)]
    assert bars  # the bar was drawn under the log while the job ran


def screen(terminal: bytes) -> list[str]:
    """What a terminal shows after `terminal`'s bytes, for the few controls the bars use:
    carriage return, line feed, erase line (ESC[2K), cursor up (ESC[1A); colours ignored."""
    rows, row, col = [""], 0, 0
    for token in re.findall(rb"\x1b\[[0-9;?]*[A-Za-z]|\r|\n|[^\x1b\r\n]+", terminal):
        if token == b"\r":
            col = 0
        elif token == b"\n":
            row += 1
            rows += [""] * (row + 1 - len(rows))
        elif token == b"\x1b[2K":
            rows[row] = ""
        elif token == b"\x1b[1A":
            row = max(0, row - 1)
        elif not token.startswith(b"\x1b"):
            text = token.decode(errors="replace")
            line = rows[row].ljust(col)
            rows[row] = line[:col] + text + line[col + len(text) :]
            col += len(text)
    return rows


@pytest.mark.parametrize("command", ["wait", "logs -f"])
def test_ctrl_c_ends_the_bar_cleanly(server: ServerProcess, tmp_path: Path, command: str):
    job_id = submit(server, trainer(600, 0.05))
    try:
        code, terminal = on_terminal(
            server, tmp_path / "out", *command.split(), str(job_id), interrupt_on=b"ETA"
        )  # fmt: skip
        assert code == 130
        assert terminal.endswith(b"\x1b[?25h")  # the cursor shown again, no traceback
        assert b"Traceback" not in terminal
        # The bar is taken away: the job runs on, a last frame would look like its state.
        shown = [line for line in screen(terminal) if line.strip()]
        assert not [line for line in shown if f"job {job_id}" in line], shown
        assert json_state(server, job_id) == "RUNNING"  # only the watching ended
    finally:
        server.cli("cancel", str(job_id))


def json_state(server: ServerProcess, job_id: int) -> str:
    return str(server.client().job(job_id)["state"])


# -- piped: byte-identical to before ---------------------------------------------------------
def test_piped_wait_and_logs_follow_print_exactly_what_they_did_before(server: ServerProcess):
    ok = submit(server, trainer(10, 0.02))
    bad = submit(server, trainer(10, 0.02, "raise SystemExit(3)\n"))
    done = server.cli("wait", str(ok))
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    failed = server.cli("wait", str(ok), str(bad), check=False)
    assert (failed.returncode, failed.stdout) == (1, "")
    assert failed.stderr == f"gpuyard: job {bad} FAILED: NonZeroExitCode: exited with code 3\n"
    env = server.cli_env()
    follow = subprocess.run([GPUYARD, "logs", "-f", str(ok)], capture_output=True, env=env,
                            timeout=60, check=True)  # fmt: skip
    expected = b"".join(
        f"::gpuyard progress step={i} total=10 loss={2 / i:.4f} acc={i / 100:.2f}\n".encode()
        for i in range(1, 11)
    )
    assert (follow.stdout, follow.stderr) == (expected, b"")


# -- top -------------------------------------------------------------------------------------
def test_top_shows_each_running_job_s_progress(server: ServerProcess):
    job_id = submit(server, trainer(600, 0.05))
    try:
        wait_for(lambda: "ETA" in server.cli("show", str(job_id)).stdout)  # a rate known
        env = {**server.cli_env(), "COLUMNS": "200"}  # rich's width when not on a terminal
        top = subprocess.run([GPUYARD, "top", "-n", "1"], capture_output=True, text=True,
                             env=env, timeout=60, check=True).stdout  # fmt: skip
        lines = top.splitlines()
        at = next(i for i, line in enumerate(lines) if line.startswith("JOBID"))
        header, row = lines[at], lines[at + 1]  # the job table, under the GPU table
        assert row.split()[0] == str(job_id)
        assert header.split()[-1] == "PROGRESS"
        assert re.search(r"[█░]{10} +\d+% ETA \d+:\d\d$", row), row
    finally:
        server.cli("cancel", str(job_id))
