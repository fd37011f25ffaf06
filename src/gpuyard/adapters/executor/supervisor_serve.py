"""The supervisor's fork-server mode (`supervisor.py --serve JOBS_DIR`), loaded only by it.

One long-lived process, started the way a supervisor is (`forkserver.py` is its client), whose
forks become supervisors at once: each runs the supervisor's `main`, handed to `serve`. Standard
library only, found beside the supervisor as its pty part is (see `supervisor._part`).
"""

import _signal as signal  # type: ignore[import-not-found]
import os

TYPE_CHECKING = False  # `typing` is not imported at the start
if TYPE_CHECKING:
    from collections.abc import Callable

# Requests on stdin: JOBDIR NUL LOG_PATH NUL (no path holds a NUL). Answers on stdout, one line
# each: "pid PID" or "error ERRNO" per request, in order; "exit PID CODE" when a supervisor
# it forked ends (CODE as `os.waitstatus_to_exitcode`).


def serve(main: "Callable[[str], None]") -> None:
    """Fork a supervisor (running `main(JOBDIR)`) per request until stdin closes (the server
    went away)."""
    import ctypes  # noqa: F401  (loaded here once: the subreaper's prctl in every fork)
    import select

    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, _ignore)  # a handler, so that SIGCHLD wakes the select
    own = [0, 1, wake_r, wake_w]
    pending = b""
    while True:
        ready = select.select([0, wake_r], [], [])[0]
        if wake_r in ready:
            os.read(wake_r, 4096)
            _tell_exits()
        if 0 in ready:
            data = os.read(0, 65536)
            if not data:
                return  # the supervisors it forked run on, in their own sessions
            pending += data
            while pending.count(b"\0") >= 2:
                jobdir, log_path, pending = pending.split(b"\0", 2)
                _fork_one(os.fsdecode(jobdir), os.fsdecode(log_path), own, main)


def _ignore(signum: int, frame: object) -> None:
    pass


def _fork_one(jobdir: str, log_path: str, own: list[int], main: "Callable[[str], None]") -> None:
    try:
        pid = os.fork()
    except OSError as exc:
        _tell(f"error {exc.errno}")
        return
    if pid == 0:
        _become_supervisor(jobdir, log_path, own, main)
    _tell(f"pid {pid}")


def _tell(line: str) -> None:
    try:
        os.write(1, f"{line}\n".encode())
    except OSError:
        os._exit(0)  # the server is gone: so is the reason to fork


def _tell_exits() -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        _tell(f"exit {pid} {os.waitstatus_to_exitcode(status)}")


def _become_supervisor(
    jobdir: str, log_path: str, own: list[int], main: "Callable[[str], None]"
) -> None:
    """In the fork: what `python -I -S supervisor.py JOBDIR` with its output to the log would
    be, in a session of its own. Its working directory is its job's folder: its command line is
    the fork server's, so that is how the executor recognises it."""
    code = 1
    try:
        os.setsid()
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        null = os.open("/dev/null", os.O_RDONLY)
        os.dup2(null, 0)
        log = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        os.dup2(log, 1)
        os.dup2(log, 2)
        for fd in {null, log, *own} - {0, 1, 2}:
            os.close(fd)
        os.chdir(jobdir)
        main(jobdir)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        os._exit(code)
