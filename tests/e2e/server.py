"""A real `gpuyard server` on a free loopback port, and the real CLI against it."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil

from gpuyard.client import Client

BIN = Path(sys.executable).parent
GPUYARD = str(BIN / "gpuyard")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ServerProcess:
    """Starts, kills (-9) and restarts one server on one state dir."""

    def __init__(
        self,
        state_dir: Path,
        *args: str,
        env: dict[str, str] | None = None,
        wrap: tuple[str, ...] = (),
    ) -> None:
        """`wrap`: a command the server is run under, which execs its arguments (so that the
        process is the server's: `unshare ...`)."""
        self.state_dir = state_dir
        self.wrap = list(wrap)
        self.port = free_port()
        self.args = list(args)
        self.env = dict(env or os.environ)
        self.env.pop("GPUYARD_TOKEN", None)
        # A root test server stays off the machine's default Unix socket (tests run side by
        # side; a CLI finding it would talk to whichever server holds it): `--socket` wins.
        self.env.setdefault("GPUYARD_SOCKET", "off")
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = state_dir.parent / f"server-{self.port}.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 120) -> ServerProcess:
        """Start it and return once it answers /healthz (or raise once it has exited): the
        deadline only catches a hang, a loaded 2-core machine takes tens of seconds."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        argv = [*self.wrap, GPUYARD, "server", "--port", str(self.port), "--state-dir",
                str(self.state_dir), *self.args]  # fmt: skip
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=self.env)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited: {self.log.read_text()[-2000:]}")
            try:
                urllib.request.urlopen(f"{self.url}/healthz", timeout=1).read()
                return self
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("server did not start in time")

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill9()

    def client(self) -> Client:
        return Client(self.url, token=(self.state_dir / "token").read_text().strip())

    def cli_env(self) -> dict[str, str]:
        env = dict(self.env)
        env.update(GPUYARD_URL=self.url, GPUYARD_STATE_DIR=str(self.state_dir))
        return env

    def cli(self, *args: str, check: bool = True, cwd: Path | None = None,
            timeout_s: float = 60) -> subprocess.CompletedProcess[str]:  # fmt: skip
        result = subprocess.run(
            [GPUYARD, *args], capture_output=True, text=True, env=self.cli_env(), cwd=cwd,
            timeout=timeout_s,
        )  # fmt: skip
        if check and result.returncode != 0:
            raise AssertionError(f"gpuyard {' '.join(args)} failed: {result.stderr}")
        return result

    def kill_jobs(self) -> None:
        """Kill every supervisor (and its tree) this server's state dir started: its own
        machine's (`jobs/`) and a local cluster's other machines' (`machines/<name>/jobs/`)."""
        roots = (str(self.state_dir / "jobs"), str(self.state_dir / "machines"))
        for proc in psutil.process_iter(["cmdline"]):
            cmdline = proc.info["cmdline"] or []
            if any(arg.startswith(roots) for arg in cmdline):
                for child in [*proc.children(recursive=True), proc]:
                    try:
                        child.kill()
                    except psutil.NoSuchProcess:
                        pass


def wait_for(predicate, timeout_s: float = 30, interval_s: float = 0.05):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval_s)
    raise AssertionError("condition not met in time")


def wait_ended(client: Client, job_id: int | str, timeout_s: float = 30) -> dict:  # type: ignore[type-arg]
    """The job once it has ended. A job is PENDING between its submit and its launch (and
    again when requeued), so waiting for "not RUNNING" would catch it before it started."""
    return wait_for(  # type: ignore[no-any-return]
        lambda: (j := client.job(int(job_id)))["state"] not in ("PENDING", "RUNNING") and j,
        timeout_s,
    )


def pid_alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
