"""Per-job supervisor: a tiny program (standard library only, started with `python -I -S`) that
runs one job's process tree, enforces its time limit, stops it on SIGTERM, and records how it
ended in the job's folder. It outlives a server restart, so no job depends on the server.

    python -I -S supervisor.py JOBDIR GRACE_S TIME_LIMIT_S WORKDIR -- ARGV...

It becomes a child subreaper, so every orphan of the job is re-parented to it and can be
stopped: when the job's main process ends, whatever it left behind is killed, as Slurm does.

Start-up time is the job's submit-to-running latency, so it imports only built-in modules
(`_signal`, not `signal`, which pulls in `enum`), runs from a compiled .pyc, and never lets
`os.execvp` import `warnings`.
"""

import _signal as signal  # type: ignore[import-not-found]
import os
import sys
import time

PR_SET_CHILD_SUBREAPER = 36
_job_pgid = 0
_stage = 0  # 0 running, 1 SIGTERM sent, 2 SIGKILL sent
_timed_out = False
_stop_requested = False  # SIGTERM from the server (cancel, preemption), not the time limit
_grace_s = 10.0
_limit_s = 0.0


def _say(message: str) -> None:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
    os.write(2, f"gpuyard: *** {stamp} {message} ***\n".encode())


def _descendants() -> list[int]:
    """Pids of every process below this one, from /proc (children of children included)."""
    me = os.getpid()
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(b")") + 2 :].split()[1])
        children.setdefault(ppid, []).append(int(name))
    found: list[int] = []
    todo = [me]
    while todo:
        for child in children.get(todo.pop(), ()):
            found.append(child)
            todo.append(child)
    return found


def _signal_tree(sig: int) -> None:
    if _job_pgid:
        try:
            os.killpg(_job_pgid, sig)  # also members that left our subtree before we could see
        except OSError:
            pass
    for pid in _descendants():
        try:
            os.kill(pid, sig)
        except OSError:
            pass


def _begin_stop(why: str) -> None:
    global _stage
    if _stage:
        return
    _stage = 1
    _say(f"{why}: sending SIGTERM, SIGKILL in {_grace_s:g}s")
    _signal_tree(signal.SIGTERM)
    signal.setitimer(signal.ITIMER_REAL, max(_grace_s, 0.01))


def _on_term(signum: int, frame: object) -> None:
    global _stop_requested
    _stop_requested = True
    _begin_stop("stop requested")


def _on_alarm(signum: int, frame: object) -> None:
    global _stage, _timed_out
    if _stage == 0:
        _timed_out = True
        _begin_stop(f"time limit of {_limit_s:g}s reached")
    elif _stage == 1:
        _stage = 2
        _say("grace period over: sending SIGKILL")
        _signal_tree(signal.SIGKILL)


def _become_subreaper() -> None:
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except Exception:
        pass  # without it, orphans that escape the process group may survive


def _write_pid(path: str) -> None:
    """No fsync: the pid only matters while this machine stays up."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(os.getpid()))
    os.rename(tmp, path)


def _write_atomic(path: str, text: str) -> None:
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, text.encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(tmp, path)
    dfd = os.open(os.path.dirname(path), os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def _run_child(workdir: str, argv: list[str]) -> None:
    os.setpgid(0, 0)
    for sig in (signal.SIGTERM, signal.SIGALRM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    try:
        os.chdir(workdir)
        os.execv(_which(argv[0]), argv)
    except OSError as exc:
        os.write(2, f"gpuyard: cannot run {argv[0]!r} in {workdir!r}: {exc.strerror}\n".encode())
    os._exit(127)


def _which(program: str) -> str:
    """PATH lookup as execvp does it."""
    if "/" in program:
        return program
    for folder in os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin").split(":"):
        path = os.path.join(folder or ".", program)
        if os.access(path, os.X_OK) and not os.path.isdir(path):
            return path
    raise FileNotFoundError(2, "No such file or directory")


def _reap_leftovers() -> None:
    """Kill and reap whatever the job left behind, then return."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        _signal_tree(signal.SIGKILL)
        try:
            while True:
                pid, _ = os.waitpid(-1, os.WNOHANG)
                if pid == 0:
                    break
        except ChildProcessError:
            return
        time.sleep(0.01)


def main() -> None:
    global _grace_s, _limit_s, _job_pgid
    jobdir, grace, limit, workdir, sep, *argv = sys.argv[1:]
    assert sep == "--" and argv, "usage: supervisor.py JOBDIR GRACE_S LIMIT_S WORKDIR -- ARGV..."
    _grace_s, _limit_s = float(grace), float(limit)
    _write_pid(os.path.join(jobdir, "supervisor.pid"))
    _become_subreaper()  # before the fork: an orphan made in the job's first ms must reach us
    signal.signal(signal.SIGTERM, _on_term)
    signal.signal(signal.SIGINT, _on_term)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGALRM, _on_alarm)
    if _limit_s > 0:
        # Before the fork: interval timers are not inherited, and a failure here must happen
        # before the job exists, never leave it running unsupervised.
        signal.setitimer(signal.ITIMER_REAL, _limit_s)
    child = os.fork()
    if child == 0:
        _run_child(workdir, argv)
    try:
        os.setpgid(child, child)
    except OSError:
        pass
    _job_pgid = child
    if _stage:
        _signal_tree(signal.SIGTERM)  # a stop that arrived before the job existed
    _, status = os.waitpid(child, 0)
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _reap_leftovers()
    code = os.waitstatus_to_exitcode(status)
    exit_code, sig = (str(code), "null") if code >= 0 else ("null", str(-code))
    _write_atomic(
        os.path.join(jobdir, "status.json"),
        f'{{"exit_code": {exit_code}, "signal": {sig}, '
        f'"timed_out": {"true" if _timed_out else "false"}, '
        f'"stop_requested": {"true" if _stop_requested else "false"}, '
        f'"ended_at": {time.time()!r}}}\n',
    )


if __name__ == "__main__":
    main()
