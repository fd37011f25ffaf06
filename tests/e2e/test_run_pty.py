"""`gpuyard run -- sh` under a real pty, against a real server: the session is a job whose
terminal is this pty (typing, output, exit code, window size, Ctrl-C, cancel, queue)."""

from __future__ import annotations

import fcntl
import os
import select
import signal
import stat
import struct
import subprocess
import termios
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.server import GPUYARD, ServerProcess, wait_ended, wait_for


class Terminal:
    """A `gpuyard` command whose stdin, stdout and stderr are a pty this test types into."""

    def __init__(self, server: ServerProcess, *args: str, rows: int = 24, cols: int = 80) -> None:
        self.master, slave = os.openpty()
        self.resize(rows, cols, signal_client=False)
        self.proc = subprocess.Popen(
            [GPUYARD, *args], stdin=slave, stdout=slave, stderr=slave, env=server.cli_env(),
            start_new_session=True,
        )  # fmt: skip
        os.close(slave)
        self.seen = b""

    def type(self, text: str) -> None:
        os.write(self.master, text.encode())

    def expect(self, wanted: str, timeout_s: float = 30) -> str:
        """Everything shown so far, once `wanted` is among it."""
        deadline = time.monotonic() + timeout_s
        while wanted.encode() not in self.seen:
            left = deadline - time.monotonic()
            assert left > 0, f"{wanted!r} never appeared; the terminal shows {self.seen!r}"
            if select.select([self.master], [], [], left)[0]:
                try:
                    self.seen += os.read(self.master, 65536)
                except OSError:  # EIO: the client is gone and so is the terminal's other end
                    assert wanted.encode() in self.seen, f"{wanted!r} never came: {self.seen!r}"
        return self.seen.decode(errors="replace")

    def resize(self, rows: int, cols: int, signal_client: bool = True) -> None:
        fcntl.ioctl(self.master, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        if signal_client:
            self.proc.send_signal(signal.SIGWINCH)  # as the terminal emulator's resize does

    def exit_code(self, timeout_s: float = 30) -> int:
        deadline = time.monotonic() + timeout_s
        while self.proc.poll() is None:
            assert time.monotonic() < deadline, f"gpuyard run did not exit: {self.seen!r}"
            if select.select([self.master], [], [], 0.1)[0]:
                try:
                    self.seen += os.read(self.master, 65536)
                except OSError:
                    pass
        return self.proc.returncode

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        os.close(self.master)


@pytest.fixture
def terminals(server: ServerProcess) -> Iterator[list[Terminal]]:
    made: list[Terminal] = []
    yield made
    for terminal in made:
        terminal.close()


def _run_sh(server: ServerProcess, made: list[Terminal], **size: int) -> Terminal:
    terminal = Terminal(server, "run", "--gpus", "1", "--", "sh", **size)
    made.append(terminal)
    return terminal


def _session_id(server: ServerProcess) -> int:
    return int(wait_for(lambda: server.cli("queue", "--format", "%i").stdout.split()[1:2])[0])


def test_typed_commands_run_in_the_session_and_its_exit_code_is_runs(server, terminals):
    term = _run_sh(server, terminals)
    job_id = _session_id(server)
    term.type("echo hi-from-$GPUYARD_JOB_ID; tty\n")
    shown = term.expect(f"hi-from-{job_id}")
    term.expect("/dev/pts/")
    assert "not a tty" not in shown
    # Its terminal's socket is for its user alone (the kernel checks that on connect).
    sock = server.state_dir / "jobs" / str(job_id) / "attach.sock"
    assert stat.S_ISSOCK(sock.stat().st_mode) and stat.S_IMODE(sock.stat().st_mode) == 0o600
    # The session is a job while it runs: in the queue, RUNNING, holding its GPU.
    queue = server.cli("queue").stdout
    assert str(job_id) in queue and "RUNNING" in queue
    term.type("exit 3\n")
    assert term.exit_code() == 3
    ended = wait_ended(server.client(), job_id)
    assert (ended["state"], ended["exit_code"], ended["kind"]) == ("FAILED", 3, "interactive")
    # What the session showed is in its log too.
    assert f"hi-from-{job_id}" in server.cli("logs", str(job_id)).stdout


def test_the_window_size_follows_the_terminal(server, terminals):
    term = _run_sh(server, terminals, rows=30, cols=100)
    term.type("echo $(stty size)-rows-cols\n")
    term.expect("30 100-rows-cols")
    term.resize(40, 132)
    wait_for(lambda: _size_seen(term, "40 132"), timeout_s=30, interval_s=0.2)
    term.type("exit\n")
    assert term.exit_code() == 0


def _size_seen(term: Terminal, size: str) -> bool:
    """Asks the session its size until it answers `size` (a SIGWINCH is delivered once the
    client has handled it: the order of the two is the client's, not the test's)."""
    term.type("echo $(stty size)-rows-cols\n")
    try:
        term.expect(f"{size}-rows-cols", timeout_s=1)
        return True
    except AssertionError:
        return False


def test_ctrl_c_interrupts_the_sessions_command_not_the_session(server, terminals):
    term = _run_sh(server, terminals)
    job_id = _session_id(server)
    term.type("echo ready-$((2+2))\n")
    term.expect("ready-4")  # the session runs (what it prints, not the echo of what was typed)
    term.type("sleep 100\n")
    server_side = wait_for(lambda: _sleeping(job_id, server.state_dir))
    term.type("\x03")  # a byte through the pty: its line discipline sends the SIGINT
    wait_for(lambda: not server_side.is_running() or server_side.status() == "zombie")
    term.type("echo after-$?-$((1+1))\n")
    term.expect("after-130-2")
    term.type("exit 0\n")
    assert term.exit_code() == 0


def _sleeping(job_id: int, state_dir: Path):  # type: ignore[no-untyped-def]
    """The session's `sleep 100`, once it runs (found by the job id in its environment, and
    its checkpoint folder in this server's state dir: another test's server, beside this
    one, may run a job of the same id)."""
    import psutil

    for proc in psutil.process_iter(["cmdline"]):
        if proc.info["cmdline"] != ["sleep", "100"]:
            continue
        try:
            env = proc.environ()
            ours = env.get("GPUYARD_CHECKPOINT_DIR", "").startswith(str(state_dir))
            if env.get("GPUYARD_JOB_ID") == str(job_id) and ours:
                return proc
        except psutil.Error:
            continue
    return None


def test_cancel_from_another_terminal_ends_the_session_and_the_client(server, terminals):
    term = _run_sh(server, terminals)
    job_id = _session_id(server)
    term.type("echo up-$((3+3))\n")
    term.expect("up-6")
    server.cli("cancel", str(job_id))
    code = term.exit_code()
    assert code != 0
    assert f"job {job_id} CANCELLED" in term.seen.decode(errors="replace")
    assert wait_ended(server.client(), job_id)["state"] == "CANCELLED"


def test_a_session_waits_for_its_gpus_and_says_why(server, terminals):
    hog = server.cli("submit", "--gpus", "4", "--", "sleep", "300").stdout.strip()
    wait_for(lambda: server.client().job(int(hog))["state"] == "RUNNING")
    term = _run_sh(server, terminals)
    term.expect("is waiting to start: Resources")
    server.cli("cancel", hog)
    term.type("echo started-$((4+4))\n")
    term.expect("started-8")
    term.type("exit\n")
    assert term.exit_code() == 0


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGHUP])
def test_giving_up_before_the_start_cancels_the_session(server, terminals, sig):
    hog = server.cli("submit", "--gpus", "4", "--", "sleep", "300").stdout.strip()
    wait_for(lambda: server.client().job(int(hog))["state"] == "RUNNING")
    term = _run_sh(server, terminals)
    term.expect("is waiting to start")
    job_id = max(job["id"] for job in server.client().jobs())
    term.proc.send_signal(sig)  # Ctrl-C while it waits (not raw yet), or its terminal closed
    assert term.exit_code() == 130
    assert f"job {job_id} cancelled before it started" in term.seen.decode(errors="replace")
    assert server.client().job(job_id)["state"] == "CANCELLED"


def test_the_time_limit_ends_the_session_and_says_so(server, terminals):
    term = Terminal(server, "run", "-t", "0:0:3", "--", "sh")
    terminals.append(term)
    job_id = _session_id(server)
    term.type("echo in-$((9+9))\n")
    term.expect("in-18")
    assert term.exit_code() != 0
    shown = term.seen.decode(errors="replace")
    assert "time limit of 3s reached" in shown  # the supervisor's line, on the terminal too
    assert f"job {job_id} TIMEOUT" in shown
    assert wait_ended(server.client(), job_id)["state"] == "TIMEOUT"


def test_detach_and_attach_again(server, terminals):
    term = _run_sh(server, terminals)
    job_id = _session_id(server)
    term.type("X=kept; echo set-$((5+5))\n")
    term.expect("set-10")
    term.type("\r~.")
    assert term.exit_code() == 0
    assert f"gpuyard attach {job_id}" in term.seen.decode(errors="replace")
    assert server.client().job(job_id)["state"] == "RUNNING"
    again = Terminal(server, "attach", str(job_id))
    terminals.append(again)
    again.type("echo x-is-$X-$((6+6)); exit 4\n")
    again.expect("x-is-kept-12")
    assert again.exit_code() == 4


def test_attach_redraws_the_session_without_a_key(server, terminals):
    """A shell at its prompt (or a full-screen program) is made to draw again on attach: the
    prompt is there at once, not a blank terminal until a key (it used to be)."""
    term = Terminal(server, "run", "--gpus", "1", "--env", "PS1=sess-ready> ", "--",
                    "bash", "--norc", "--noprofile", "-i")  # fmt: skip
    terminals.append(term)
    job_id = _session_id(server)
    term.expect("sess-ready> ")
    term.type("\r~.")
    assert term.exit_code() == 0
    again = Terminal(server, "attach", str(job_id))
    terminals.append(again)
    again.expect("sess-ready> ")  # nothing typed
    again.type("exit 5\n")
    assert again.exit_code() == 5


def test_another_attach_takes_the_session_over(server, terminals):
    first = _run_sh(server, terminals)
    job_id = _session_id(server)
    first.type("echo one-$((7+7))\n")
    first.expect("one-14")
    second = Terminal(server, "attach", str(job_id))
    terminals.append(second)
    assert first.exit_code() == 0
    assert "taken over" in first.seen.decode(errors="replace")
    second.type("echo two-$((8+8)); exit\n")
    second.expect("two-16")
    assert second.exit_code() == 0


def test_a_server_on_another_machine_is_refused_before_anything_is_queued(server):
    env = {**server.cli_env(), "GPUYARD_URL": "http://192.0.2.1:8765"}  # TEST-NET: not here
    done = subprocess.run([GPUYARD, "run", "--", "sh"], capture_output=True, text=True, env=env,
                          timeout=60)  # fmt: skip
    assert done.returncode == 2
    assert "on another machine" in done.stderr and len(done.stderr.splitlines()) == 1
    assert server.client().jobs() == []


def test_a_session_nobody_attaches_to_ends_without_running(tmp_path, monkeypatch):
    """Its `gpuyard run` was killed while it waited: the job does not hold its GPUs until its
    time limit, its program never runs, and its reason says why."""
    from gpuyard.adapters.executor import job_folder
    from tests.e2e.executor_rig import Rig

    monkeypatch.setattr(job_folder, "ATTACH_TIMEOUT_S", 0.5)
    rig = Rig(tmp_path)
    try:
        rig.start(1, "touch ran", kind="interactive")
        assert rig.wait_end(1).exit_code == 127
        assert "cannot run 'sh': nobody attached to the session in time" in rig.log(1)
        assert not (tmp_path / "ran").exists()
        assert not (rig.executor.job_dir(1) / "attach.sock").exists()
    finally:
        rig.executor.close()


@pytest.fixture(scope="module")
def users():  # type: ignore[no-untyped-def]
    from tests.e2e.unix_users import unix_users

    with unix_users() as made:
        yield made


@pytest.mark.skipif(os.geteuid() != 0, reason="jobs run as other users only on a root server")
def test_a_users_session_is_hers_alone(users):  # type: ignore[no-untyped-def]
    """On a root server alice's session runs as alice on a terminal that is hers; its socket
    is hers, 0600: bob cannot connect (the kernel says no), root can."""
    import pwd
    import shutil
    import tempfile
    from pathlib import Path

    from gpuyard.adapters.identity import unix_identity
    from gpuyard.cli.attach import connect, frame
    from gpuyard.services.launch.run_as import RunAsPolicy
    from tests.e2e.executor_rig import Rig

    state = Path(tempfile.mkdtemp(prefix="gpuyard-pty-", dir="/tmp"))
    state.chmod(0o711)
    rig = Rig(state)
    try:
        alice = RunAsPolicy(unix_identity, 0, "root").for_owner(users.alice)
        rig.start(1, "exec sh", kind="interactive", run_as=alice, workdir=Path("/"))
        path = rig.executor.job_dir(1) / "attach.sock"
        wait_for(path.exists)
        info = path.stat()
        assert (info.st_uid, stat.S_IMODE(info.st_mode)) == (alice.uid, 0o600)
        bob = pwd.getpwnam(users.bob)
        child = os.fork()
        if child == 0:  # bob tries
            os.setgid(bob.pw_gid)
            os.setuid(bob.pw_uid)
            try:
                connect(str(path)).close()
                os._exit(0)
            except PermissionError:
                os._exit(13)
            except BaseException:
                os._exit(1)
        assert os.waitstatus_to_exitcode(os.waitpid(child, 0)[1]) == 13
        with connect(str(path)) as sock:  # root may
            sock.sendall(frame(b"w", (24).to_bytes(2, "big") + (80).to_bytes(2, "big")))
            sock.sendall(frame(b"d", b"id -un; ls -l $(tty) | cut -d' ' -f3; exit 7\n"))
            seen = b""
            while chunk := sock.recv(65536):
                seen += chunk
        assert seen.count(users.alice.encode()) >= 2  # her name, and her terminal's owner
        assert rig.wait_end(1).exit_code == 7
    finally:
        rig.executor.close()
        shutil.rmtree(state, ignore_errors=True)
