"""Node shim: the process a job's node actor starts; it runs the node's command and makes sure
nothing of it outlives the actor or the node's raylet. Standard library only, started with
`python -I -S`:

    python -I -S shim.py GRACE_S WORKDIR RAYLET_PID STATUS_FD -- ARGV...

File descriptors: 0 = a pipe whose write end only the actor holds (EOF: the actor is gone);
1 and 2 = the pipe the actor reads the output from; STATUS_FD = a pipe to the actor, on which
the shim writes `pid <shim pid>` first and `exit <code> <cause>` last (code negative: killed by
that signal; cause `raylet` if the shim stopped the command because the raylet died, else `-`).

Why it detaches (forks once more and lets the first process exit at once): a Ray worker, when
it exits, SIGKILLs its direct children (`kill_child_processes_on_worker_exit`, on by
default). The shim would then die without stopping the command, whose processes would
survive. Detached, the shim outlives its actor just long enough to stop the job properly.

It stops the command (SIGTERM to its process group and every descendant, GRACE_S, then
SIGKILL) when it gets SIGTERM (the actor's `stop`), when fd 0 reaches EOF (its actor is gone,
however it died), or when the node's raylet exits (watched with a pidfd: a Ray worker whose
raylet died can linger for a long time before it notices, so the pipe alone is not enough).
It is a child subreaper, so orphans of the command are re-parented to it and killed too;
when the command ends, whatever it left behind is killed and reaped before the shim exits.
"""

import os
import select
import signal
import sys
import time

PR_SET_CHILD_SUBREAPER = 36
_status_fd = -1
_child = 0
_stage = 0  # 0 running, 1 SIGTERM sent, 2 SIGKILL sent
_kill_at = 0.0
_grace_s = 10.0
_cause = "-"  # why the command was stopped: "-" (it ended or was asked to), "raylet", "actor"


def _say(message: str) -> None:
    try:
        os.write(2, f"gpuyard: *** {time.strftime('%Y-%m-%dT%H:%M:%S')} {message} ***\n".encode())
    except OSError:
        pass  # the actor (the pipe's reader) is gone: say nothing, but go on stopping


def _status(line: str) -> None:
    try:
        os.write(_status_fd, f"{line}\n".encode())
    except OSError:
        pass  # the actor is gone: nobody to tell


def _descendants() -> list[int]:
    """Pids below this process (children of children included), from /proc."""
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
    todo = [os.getpid()]
    while todo:
        for child in children.get(todo.pop(), ()):
            found.append(child)
            todo.append(child)
    return found


def _signal_all(sig: int) -> None:
    if _child:
        try:
            os.killpg(_child, sig)  # also members that already left our subtree
        except OSError:
            pass
    for pid in _descendants():
        try:
            os.kill(pid, sig)
        except OSError:
            pass


def _begin_stop(why: str, cause: str = "-") -> None:
    global _stage, _kill_at, _cause
    if _stage:
        return
    _stage, _cause = 1, cause
    _kill_at = time.monotonic() + _grace_s
    _say(f"{why}: sending SIGTERM, SIGKILL in {_grace_s:g}s")
    _signal_all(signal.SIGTERM)


def _on_term(signum: int, frame: object) -> None:
    _begin_stop("stop requested")


def _become_subreaper() -> None:
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except Exception:
        pass  # without it, orphans that leave the process group may survive


def _watch_raylet(pid: int) -> int:
    """A pidfd that becomes readable when the raylet exits; -1 if it cannot be had."""
    if pid <= 0:
        return -1
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return -1


def _run_child(workdir: str, argv: list[str]) -> None:
    os.setpgid(0, 0)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_DFL)
    try:
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.close(_status_fd)
        if workdir:
            os.chdir(workdir)
        os.execvp(argv[0], argv)
    except OSError as exc:
        os.write(2, f"gpuyard: cannot run {argv[0]!r} in {workdir!r}: {exc.strerror}\n".encode())
    os._exit(127)


def _reap_leftovers() -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        _signal_all(signal.SIGKILL)
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        except ChildProcessError:
            return
        time.sleep(0.01)


def _supervise(workdir: str, raylet_pid: int, argv: list[str]) -> int:
    global _child, _stage
    _become_subreaper()  # before the fork: an orphan made in the job's first ms must reach us
    signal.signal(signal.SIGTERM, _on_term)
    signal.signal(signal.SIGINT, _on_term)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    raylet = _watch_raylet(raylet_pid)
    child = os.fork()
    if child == 0:
        _run_child(workdir, argv)
    try:
        os.setpgid(child, child)
    except OSError:
        pass
    _child = child
    if _stage:
        _signal_all(signal.SIGTERM)  # a stop that arrived before the command existed
    watched = {0: ("the node's Ray actor is gone", "actor")}
    if raylet >= 0:
        watched[raylet] = ("the node's raylet exited", "raylet")
    while True:
        pid, status = os.waitpid(child, os.WNOHANG)
        if pid:
            break
        if _stage == 1 and time.monotonic() >= _kill_at:
            _stage = 2
            _say("grace period over: sending SIGKILL")
            _signal_all(signal.SIGKILL)
        try:
            ready = select.select(list(watched), [], [], 0.05)[0] if watched else []
            if not watched:
                time.sleep(0.05)
        except InterruptedError:
            continue
        for fd in ready:
            if fd == 0 and os.read(0, 4096):
                continue  # the actor never writes; data is not an end
            _begin_stop(*watched.pop(fd))
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _reap_leftovers()
    return os.waitstatus_to_exitcode(status)


def main() -> None:
    global _grace_s, _status_fd
    grace, workdir, raylet_pid, status_fd, sep, *argv = sys.argv[1:]
    if sep != "--" or not argv:
        sys.exit("usage: shim.py GRACE_S WORKDIR RAYLET_PID STATUS_FD -- ARGV...")
    _grace_s, _status_fd = float(grace), int(status_fd)
    if os.fork():
        os._exit(0)  # detach from the Ray worker (see the module docstring)
    os.setsid()
    _status(f"pid {os.getpid()}")
    try:
        code = _supervise(workdir, int(raylet_pid or 0), argv)
    except BaseException:
        _reap_leftovers()  # a bug here must not leave the job running unsupervised
        raise
    _status(f"exit {code} {_cause}")
    os._exit(0)


if __name__ == "__main__":
    main()
