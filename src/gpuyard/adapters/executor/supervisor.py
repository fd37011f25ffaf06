"""Per-job supervisor: a tiny program (standard library only, started with `python -I -S`) that
runs one job's process tree, enforces its time limit, stops it when told, and records how it
ended. It outlives a server restart, so no job depends on the server. Every backend runs it
under a `LocalExecutor`: the server's own, or on another machine of a Ray cluster that
machine's agent's (`adapters/agent/machine.py`).

    python -I -S supervisor.py JOBDIR

One module over 500 lines because it is one program run as one file: every job runs all of it
(start, pump, stop, status), and each more file is one more load at each start. The parts only
some starts need are files of their own, loaded by those starts alone (`_part`): an interactive
job's terminal (`supervisor_pty.py`) and the fork-server mode (`supervisor_serve.py`).

Its instructions come from `JOBDIR/launch.json` (mode 0600: it holds the job's environment),
written by the executor; `launch_file.py` documents every field. It starts with an almost empty
environment (the executor's choice), so nothing a submit sends (`LD_PRELOAD`, `PYTHON*`)
touches the supervisor itself: the job's environment is applied at the job's `exec` only.

The job's process: own process group; its control groups joined (`cgroups`, made by the
executor: the kernel holds it to its --mem, --cpus, pids and GPUs); the umask of `run_as`
(077 for a user's job on a shared server), its privileges dropped (`setgroups`, `setgid`,
`setuid`) before `chdir` and `exec`, so the working directory is checked with the user's
rights; argv exec'ed as is (PATH looked up in the job's environment, never a shell).

The job's stdout and stderr are one pipe, not the log file: the supervisor copies what comes
out of it to the log (`_pump`, in the same poll loop that waits for the job's end, so no
thread and no extra process). A log whose disk is full therefore never makes the job's own
writes fail: the bytes that cannot be written are dropped and counted, and once a write
succeeds again the log gets one line `gpuyard: *** log truncated: N bytes lost, the disk was
full ***` where they are missing; the total is in the status (`log_dropped_bytes`). The read end
is the supervisor's alone: if it dies, the job's next write gets SIGPIPE (EPIPE where it ignores
the signal), never a pipe that stays full forever, and the executor ends what is left of the
tree (`tree.py`). The status file is made (room for it written) as the job starts, so
that a full disk cannot keep the end from being recorded.

sbatch's -o/-e (`output_file`, `error_file`): tees of the pump, opened before the fork with
the job's user's identity (`_as_user`: seteuid/setegid/setgroups around the open, undone), so
the kernel refuses a link or a folder exactly as it would refuse the user; never through a
link (O_NOFOLLOW), and only a file of the user's own (`_own_file_only`: another user's file made
in a shared folder would hand them the output); one that cannot be opened: no fork, one
`gpuyard: cannot run ...` line in the log, exit 127 (LaunchFailed). With -e, stderr is a
second pipe in the same poll loop.

An interactive job (`pty`): the job is the leader of a new session whose controlling terminal
is a pty; the supervisor relays the master to a client of the Unix socket `attach_path`
(`supervisor_pty.Session`, its frames documented there) and copies every byte to the log. The
job execs once the first client has sent its first frame.

Time: the time limit and the warning before it (`--signal SIG@SECONDS`: `warn_signal` once,
`warn_before_s` before the limit, to every process of the job, or as sbatch's `--signal` does to
every process but the batch shell (no `B:`: a `#!/bin/bash` script survives, the programs it
runs get it) or to the batch shell alone (`B:`, for its `trap`)) are one interval timer
(ITIMER_REAL, which Linux runs on the monotonic clock: a wall-clock step neither kills nor
extends a job), armed before the job is forked, in this process, which outlives the server.

It becomes a child subreaper, so every orphan of the job is re-parented to it and can be
stopped: when the job's main process ends, whatever it left behind is killed, as Slurm does.
Stop (SIGTERM to the supervisor, or the time limit): the stop signal to every process below it
(found through /proc, so processes that left the group with `setsid` are included), the grace
period, then SIGKILL.

The status goes to `status_path` atomically (write, fsync, rename, fsync dir). A job can write
where its supervisor can while they share a Unix user, so the executor never takes the file on
trust (see `status.py`).

Start-up time is the job's submit-to-running latency, so it imports only built-in modules
(`_signal`, not `signal`, which pulls in `enum`; `_json`'s scanner, not `json`, which pulls in
`re`), runs from a compiled .pyc, never lets `os.execvp` import `warnings`, and reads neither
of its parts unless the start needs one.

Fork-server mode (`supervisor.py --serve JOBS_DIR`, `supervisor_serve.py`; its client is
`forkserver.py`): one long-lived process started the same way, whose forks become supervisors
at once (an interpreter start and the subreaper's `ctypes` paid once, not per job: ~8 ms of
every start). Each fork leaves the server's session (`setsid`), so it outlives the fork server
and the server alike, exactly as a supervisor started on its own does.
"""

import _signal as signal  # type: ignore[import-not-found]
import os
import sys
import time

TYPE_CHECKING = False  # `typing` is not imported at the start
if TYPE_CHECKING:
    from types import ModuleType

    from gpuyard.adapters.executor.supervisor_pty import Session

PR_SET_CHILD_SUBREAPER = 36
_job_pgid = 0
_stage = 0  # 0 running, 1 stop signal sent, 2 SIGKILL sent
_timed_out = False
_stop_requested = False  # SIGTERM from the server (cancel, preemption), not the time limit
_grace_s = 10.0
_limit_s = 0.0
_stop_signal = 15
_jobdir = "."
_warn_signal = 0  # `--signal SIG@SECONDS`: sent once, `_warn_before_s` before the time limit
_warn_before_s = 0.0
_warn_target = "all"  # "all", "steps" (all but the batch shell), "batch" (the shell alone)
_warned = False
_log_fd = -1  # the job's log, opened first thing in `_supervise`
_dropped = 0  # bytes of output the log lost (its disk was full), in all
_unreported = 0  # of those, not yet marked in the log
_line_start = True  # the last byte written to the log ended a line
_status_fd = -1  # the status file's .tmp, opened (and space reserved) at the start
_LOG_FULL_LINE = "gpuyard: *** log truncated: {} bytes lost, the disk was full ***\n"
# Budgets (`log_room_bytes`: what the log may still grow by, the per-job and per-user budgets'
# smaller, -1 none; `disk_reserve_bytes`: free space of the state disk the log never takes,
# so cancels, ends and registrations always land): past either, the rest of the run's output
# is cut, after one line saying so, and counted as dropped.
_log_room = -1
_disk_reserve = 0
_cut = False
# The budgets themselves (`job_budget_bytes`, `user_budget_bytes`; 0 none), held again while the
# job runs: `log_room_bytes` is what was left at the launch, but the user's other jobs (and this
# job's checkpoints) write meanwhile, so every `_check_every` bytes of output the supervisor
# sums again what the job's files, and all of `budget_uid`'s job files (logs and checkpoint
# folders in the jobs folder), hold. See `_over_budget` for the bound this gives.
_job_budget = 0
_user_budget = 0
_budget_uid = -1
_check_every = 0
_since_check = 0
_BUDGET_LINE = (
    "gpuyard: *** log cut: this job's output reached its log budget (the server's per-job or "
    "per-user limit, logs and checkpoint folders together); the rest of this run's output is "
    "not kept ***\n"
)
_RESERVE_LINE = (
    "gpuyard: *** log cut: the state disk is down to the space the server keeps for itself; "
    "the rest of this run's output is not kept ***\n"
)
_session: "Session | None" = None  # an interactive job's terminal (`pty` in the launch file)


def _say(message: str) -> None:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
    line = f"gpuyard: *** {stamp} {message} ***\n".encode()
    if _session is not None:
        _session.notice(line)
    _log_write(line)


def _log_write(data: bytes) -> None:
    """Append `data` to the log; what the disk has no room for is dropped and counted, and
    the first write that succeeds afterwards is preceded by one line saying how much."""
    global _unreported
    if _log_room >= 0 or _disk_reserve or _job_budget or _user_budget:
        data = _within_budget(data)
        if not data:
            return
    if _unreported:
        note = ("" if _line_start else "\n") + _LOG_FULL_LINE.format(_unreported)
        if _write_all(note.encode()):
            _lost(len(data))  # the note waits for a write that succeeds whole
            return
        _unreported = 0
    _lost(_write_all(data))


def _within_budget(data: bytes) -> bytes:
    """What of `data` the log may take: all of it, or (past the budget or into the disk's
    reserve) what fits, the cut's line once, and nothing after."""
    global _log_room, _cut, _dropped
    if _cut:
        _dropped += len(data)
        return b""
    line = ""
    kept_room = 0  # of `data`, what a cut keeps
    if _log_room >= 0 and len(data) > _log_room:
        line, kept_room = _BUDGET_LINE, _log_room
    elif _over_budget(len(data)):
        line = _BUDGET_LINE
    elif _disk_reserve:
        try:
            room = os.fstatvfs(_log_fd)
            if room.f_bavail * room.f_frsize < _disk_reserve + len(data):
                line = _RESERVE_LINE
        except OSError:
            pass
    if not line:
        if _log_room >= 0:
            _log_room -= len(data)
        return data
    kept = data[: max(0, kept_room)]
    _cut = True
    _dropped += len(data) - len(kept)
    _write_all(kept + (b"" if kept.endswith(b"\n") or not kept else b"\n") + line.encode())
    return b""


def _over_budget(coming: int) -> bool:
    """Whether `coming` more bytes would take this job's files past the per-job budget, or all
    of its user's job files past the per-user budget, summed again once `_check_every` bytes
    were written since the last sum (the first write sums too).

    The bound: the output the supervisors of a user's jobs let into logs takes that user's
    job files past the per-user budget by less than N x (`_check_every` + 64 KiB), N the
    user's jobs writing at once. Each supervisor sums whatever every job of the user holds at
    that moment; between two of its sums it lets through less than `_check_every` plus one
    read of the job's pipe (64 KiB); so after the last sum that saw the total within the
    budget, each of the N jobs adds less than that. The same holds for one job's own budget
    with N = 1. `_check_every` is a sixty-fourth of the smaller budget, between 64 KiB and
    4 MiB (the defaults, 4 and 16 GiB: 4 MiB), so a sum (a stat per job folder and checkpoint
    file) costs little per byte logged. Files the job writes itself (its checkpoint folder)
    are counted but never cut (that takes disk quotas): they take room from its log and its
    user's other jobs' logs."""
    global _since_check
    if not (_job_budget or _user_budget):
        return False
    _since_check += coming
    if _since_check < _check_every:
        return False
    _since_check = 0
    mine = _owned(os.path.join(_jobdir, "output.log"), -1) + _tree(
        os.path.join(_jobdir, "checkpoint"), -1)  # fmt: skip
    if _job_budget and mine + coming > _job_budget:
        return True
    if not _user_budget:
        return False
    total = 0
    try:
        entries = list(os.scandir(os.path.dirname(os.path.abspath(_jobdir))))
    except OSError:
        return False
    for entry in entries:
        if entry.name.isdigit():
            total += _owned(os.path.join(entry.path, "output.log"), _budget_uid)
            total += _tree(os.path.join(entry.path, "checkpoint"), _budget_uid)
    return total + coming > _user_budget


def _owned(path: str, uid: int) -> int:
    """The size of a file (0: none, a link, or not `uid`'s; -1: anyone's)."""
    try:
        found = os.lstat(path)
    except OSError:
        return 0
    return found.st_size if uid < 0 or found.st_uid == uid else 0


def _tree(path: str, uid: int) -> int:
    """What the files under a folder hold (links not followed), those of `uid` (-1: anyone's)."""
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            total += _owned(os.path.join(root, name), uid)
    return total


def _lost(count: int) -> None:
    global _dropped, _unreported
    _dropped += count
    _unreported += count


def _write_all(data: bytes) -> int:
    """Append `data` to the log; the number of its bytes that could not be written (0: all
    were): a full disk, or any other error (the job runs on whatever becomes of its log)."""
    global _line_start
    view = memoryview(data)
    while view:
        try:
            done = os.write(_log_fd, view)
        except OSError:
            return len(view)
        if done:
            _line_start = view[done - 1] == 10  # b"\n"
        view = view[done:]
    return 0


def _read_launch(path: str) -> dict:  # type: ignore[type-arg]
    with open(path, "rb") as f:
        text = f.read().decode()
    try:
        import _json  # a small C module; `json` costs ~6 ms (it imports `re`)

        class _Context:  # what the scanner reads of a json.JSONDecoder
            strict = True
            object_hook = object_pairs_hook = parse_constant = None
            parse_float, parse_int = float, int

        plan, _ = _json.make_scanner(_Context())(text, 0)  # type: ignore[arg-type]
    except ImportError:
        import json

        plan = json.loads(text)
    return plan  # type: ignore[no-any-return]


def _descendants() -> list[tuple[int, int]]:
    """(pid, process group) of every process below this one, from /proc (children of
    children included)."""
    me = os.getpid()
    children: dict[int, list[tuple[int, int]]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(b")") + 2 :].split()
        children.setdefault(int(fields[1]), []).append((int(name), int(fields[2])))
    found: list[tuple[int, int]] = []
    todo = [me]
    while todo:
        for child, group in children.get(todo.pop(), ()):
            found.append((child, group))
            todo.append(child)
    return found


def _signal_tree(sig: int) -> None:
    """`sig` once to every process of the job: the job's group at once (also members that
    left our subtree before we could see them), then each process below us outside that group
    (it left with `setpgid`/`setsid`). A process in the group is never signalled twice: a
    second SIGTERM 8 ms after the first re-entered a job's checkpoint handler mid-save."""
    if _job_pgid:
        try:
            os.killpg(_job_pgid, sig)
        except OSError:
            pass
    for pid, group in _descendants():
        if group == _job_pgid:
            continue
        try:
            os.kill(pid, sig)
        except OSError:
            pass


def _warn(sig: int) -> None:
    """The warning before the time limit to whom `_warn_target` names. The batch shell is
    the job's main process (its pid is the group's id): "steps" skips it, as Slurm's
    `--signal` without `B:` does, so a shell without a trap is not killed by the warning
    meant for the programs it runs; "batch" is Slurm's `B:`."""
    if _warn_target == "all":
        _signal_tree(sig)
        return
    if _warn_target == "batch":
        try:
            os.kill(_job_pgid, sig)
        except OSError:
            pass
        return
    for pid, _group in _descendants():
        if pid == _job_pgid:
            continue
        try:
            os.kill(pid, sig)
        except OSError:
            pass


def _begin_stop(why: str) -> None:
    global _stage
    if _stage:
        return
    _stage = 1
    _say(f"{why}: sending signal {_stop_signal}, SIGKILL in {_grace_s:g}s")
    _signal_tree(_stop_signal)
    signal.setitimer(signal.ITIMER_REAL, max(_grace_s, 0.01))


def _on_term(signum: int, frame: object) -> None:
    global _stop_requested, _stop_signal
    _stop_requested = True
    if not _stage:
        _stop_signal = _asked_signal() or _stop_signal
    _begin_stop("stop requested")


def _asked_signal() -> int:
    """The signal a `cancel --signal` asked for (`stop_signal` in the job's folder, written
    whole before our SIGTERM); 0: none. The job can write there too, so only a small regular
    file is read (a FIFO would block us), and only a signal number is believed."""
    try:
        flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW
        fd = os.open(os.path.join(_jobdir, "stop_signal"), flags)
    except OSError:
        return 0
    try:
        if (os.fstat(fd).st_mode & 0o170000) != 0o100000:  # S_IFREG: a regular file
            return 0
        text = os.read(fd, 16).strip()
    except OSError:
        return 0
    finally:
        os.close(fd)
    return int(text) if text.isdigit() and 1 <= int(text) <= 64 else 0


def _on_alarm(signum: int, frame: object) -> None:
    global _stage, _timed_out, _warned
    if _stage == 0 and _warn_signal and not _warned:
        _warned = True
        _say(f"time limit in {_warn_before_s:g}s: sending warning signal {_warn_signal}")
        _warn(_warn_signal)
        signal.setitimer(signal.ITIMER_REAL, _warn_before_s)  # then the limit itself
    elif _stage == 0:
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


# The signals our handlers act on (`_on_term`, `_on_alarm`): held back while the job is forked.
_STOP_SIGNALS = {signal.SIGTERM, signal.SIGINT, signal.SIGALRM}

_STATUS_ROOM = 2048  # bytes of blanks a status is written over (one block; a status is ~200)


def _reserve_status(path: str) -> None:
    """Make the status file's .tmp now, with room for the status (blanks: JSON ignores them
    after the value), so that a disk the job (or anything else) fills meanwhile cannot keep its
    end from being recorded. Blanks written, not `posix_fallocate`d: the end then overwrites
    them with no extent to convert nor size to cut (ext4 journals both: a slower end)."""
    global _status_fd
    try:
        fd = os.open(path + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    except OSError:
        return  # the disk is full already: tried again at the end
    try:
        if os.write(fd, b" " * _STATUS_ROOM) == _STATUS_ROOM:
            _status_fd, fd = fd, -1
    except OSError:
        pass
    finally:
        if fd >= 0:
            os.close(fd)  # no room: the usual write at the end


def _write_atomic(path: str, text: str) -> None:
    global _status_fd
    data = text.encode()
    fd, _status_fd = _status_fd, -1
    if fd < 0 or len(data) > _STATUS_ROOM:
        if fd >= 0:
            os.close(fd)
        fd = os.open(path + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.pwrite(fd, data, 0)  # over the blanks reserved at the start, if any
        os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(path + ".tmp", path)
    dfd = os.open(os.path.dirname(path), os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def _run_child(
    plan: dict,  # type: ignore[type-arg]
    own_fds: list[int],
    stdio: tuple[int, int],
    go: int,
    mask: "set[int]",
) -> None:
    """In the forked child: own group (an interactive job: own session, its pty its
    controlling terminal), default signals (Python ignores SIGPIPE, and an ignored signal
    stays ignored across exec), then the signal mask the supervisor had (a stop sent to the
    child meanwhile was held: it ends the child now, before the job runs), stdout and stderr
    the pump's pipes (`stdio`; -1: as inherited), the user's identity, then exec (an
    interactive job: once its first client is there, `go`)."""
    tty = _session.slave if _session is not None else -1
    if tty >= 0:
        os.setsid()
    else:
        os.setpgid(0, 0)
    for sig in (signal.SIGTERM, signal.SIGALRM, signal.SIGINT, signal.SIGHUP, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    argv, workdir, env = plan["argv"], plan["workdir"], plan["env"]
    try:
        if _session is not None:
            _session.take_terminal()
        for fd, target in ((stdio[0], 1), (stdio[1], 2)):
            if fd >= 0:
                os.dup2(fd, target)
        for fd in own_fds:  # the supervisor's own pipes and files: not the job's to hold
            os.close(fd)
        for group in plan.get("cgroups") or ():
            _join(group, argv[0])  # as root still: its limits are set, not chosen by the job
        who = plan.get("run_as")
        if who is not None:
            # Its HOME, USER, LOGNAME and SHELL are already in the job's environment.
            os.umask(who.get("umask", 0o077))
        if who is not None and (who["uid"] != os.getuid() or who["gid"] != os.getgid()):
            os.setgroups(who["groups"])  # first: only root may still change them
            os.setgid(who["gid"])
            os.setuid(who["uid"])  # last: the job can never take root back
        os.chdir(workdir)
        if go >= 0 and not os.read(go, 1):
            os._exit(127)  # nobody attached in time (or the supervisor is gone): never run
        os.execve(_which(argv[0], env.get("PATH")), argv, env)
    except OSError as exc:
        os.write(2, f"gpuyard: cannot run {argv[0]!r} in {workdir!r}: {exc.strerror}\n".encode())
    os._exit(127)


def _join(group: str, program: str) -> None:
    """Move this process (the job, before its exec) into its control group; a job that
    cannot be held to its limits does not run.

    On cgroup v1 it writes itself to the group's `tasks`, not `cgroup.procs`: it has one
    thread here (just forked), so the two move the same, but the kernel moves a process
    through `cgroup.procs` under its global threadgroup lock, whose first taking after an
    idle spell waits for an RCU grace period (5-14 ms for a job's four groups on this 2-core
    VM), and "this thread" through `tasks` without it (0.4-0.8 ms: bench/cgroups.py)."""
    tasks = os.path.join(group, "tasks")  # v1 only: a v2 group has cgroup.threads instead
    try:
        with open(tasks if os.path.exists(tasks) else os.path.join(group, "cgroup.procs"),
                  "w") as f:  # fmt: skip
            f.write("0")
    except OSError as exc:
        os.write(2, f"gpuyard: cannot run {program!r} in its cgroup {group}: {exc.strerror}\n"
                 .encode())  # fmt: skip
        os._exit(127)


def _which(program: str, path: str | None) -> str:
    """PATH lookup as execvp does it, in the job's own PATH."""
    if "/" in program:
        return program
    for folder in (path or "/usr/local/bin:/usr/bin:/bin").split(":"):
        found = os.path.join(folder or ".", program)
        if os.access(found, os.X_OK) and not os.path.isdir(found):
            return found
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


def _wait(child: int, streams: dict[int, int]) -> None:
    """Until the job's main process ends: copy its output (`streams`: the pumps' read ends,
    each with the -o/-e file it also goes to) to the log, and relay an interactive job's
    terminal (`_session`). Signals (stop, time limit) are handled by their handlers meanwhile;
    the poll resumes after each."""
    import select

    done = os.pidfd_open(child)
    poller = select.poll()
    for fd in (done, *streams):
        poller.register(fd, select.POLLIN)
    if _session is not None:
        _session.watch(poller)
    while True:
        events = poller.poll(_session.wait_ms() if _session is not None else None)
        if not events and _session is not None:
            _session.abandon()  # nobody attached in time: the job ends without running
        for fd, event in events:
            if fd in streams and not _pump(fd, streams[fd]):
                poller.unregister(fd)  # every writer closed it (the job may run on silently)
            elif _session is not None and fd != done:
                _session.handle(fd, event)
        if any(fd == done for fd, _ in events):
            os.close(done)
            return


def _pump(output: int, tee: int = -1) -> bool:
    """What the job wrote, to the log (and to its -o/-e file `tee`, if any); False at the end
    of the pipe (nothing left, no writer)."""
    try:
        data = os.read(output, 65536)
    except BlockingIOError:
        return True
    if data:
        _log_write(data)
        if tee >= 0:
            _tee(tee, data)
    return bool(data)


def _tee(fd: int, data: bytes) -> None:
    """Append `data` to an -o/-e file (non-blocking: a full disk, or a device that would block,
    loses bytes there, never stalls the job; the log keeps them all)."""
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view) :]
        except OSError:
            return


def _open_outputs(plan: dict) -> tuple[int, int, str]:  # type: ignore[type-arg]
    """sbatch's -o and -e files (`output_file`, `error_file`, expanded by the executor),
    opened for appending with the job's user's identity, so that a link, or a path that user
    may not write, is never followed with the supervisor's rights; -1 for none. Their folders
    named by a pattern (`output_folders`: `logs/%j/`) are made first, as that user. The third
    value says why one could not be opened ("": both were)."""
    fds: list[int] = []
    who = plan.get("run_as")
    folders = plan.get("output_folders") or ()
    for key, flag in (("output_file", "--output"), ("error_file", "--error")):
        path = plan.get(key)
        if not path:
            fds.append(-1)
            continue
        try:
            fds.append(_as_user(who, _open_own, path, folders))
        except OSError as exc:
            for fd in fds:
                if fd >= 0:
                    os.close(fd)
            whom = f" as {who['user']}" if who is not None and who.get("user") else ""
            return -1, -1, f"its {flag} file {path} cannot be opened{whom}: {exc.strerror}"
    return fds[0], fds[1], ""


def _as_user(who: dict | None, action, *args):  # type: ignore[no-untyped-def,type-arg]
    """`action(uid, *args)` with the effective identity and umask of `who` (this process is
    single-threaded: the switch is the whole process's, and undone), `uid` the one a file it
    opens must belong to."""
    switch = who is not None and os.geteuid() == 0 and who["uid"] != 0
    umask = os.umask(who.get("umask", 0o077)) if who is not None else None
    groups, gid = (os.getgroups(), os.getegid()) if switch else ([], 0)
    try:
        if switch:
            assert who is not None
            os.setgroups(who["groups"])
            os.setegid(who["gid"])
            os.seteuid(who["uid"])
        return action(who["uid"] if switch and who is not None else os.geteuid(), *args)
    finally:
        if switch:
            os.seteuid(0)
            os.setegid(gid)
            os.setgroups(groups)
        if umask is not None:
            os.umask(umask)


def _open_own(uid: int, path: str, folders: list[str]) -> int:
    """`path` opened (append, created with the umask), after `folders` are made (one there
    already is kept; a missing parent of the first fails the open). Never through a link,
    and only a file of `uid`'s own (or a device: /dev/null): a file another user made in a
    shared folder (/tmp) would hand them the job's output."""
    for folder in folders:
        try:
            os.mkdir(folder, 0o777)
        except FileExistsError:
            pass
        except OSError:
            break  # the open says why, in the words of the file's own path
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW, 0o666)
    except OSError as exc:
        if exc.errno == _ELOOP:
            why = "it is a symbolic link (give the file's own path)"
            raise OSError(exc.errno, why) from None
        raise
    _own_file_only(fd, uid)
    return fd


_ELOOP = 40  # Linux's errno for O_NOFOLLOW meeting a link (`errno` is not imported)


def _own_file_only(fd: int, uid: int) -> None:
    """Close `fd` and raise unless it is a regular file of `uid`'s or a character device."""
    info = os.fstat(fd)
    kind = info.st_mode & 0o170000
    if kind == 0o020000:  # a device: the kernel's permissions decided (/dev/null, a tty)
        return
    why = ""
    if kind != 0o100000:
        why = "it is not a regular file"
    elif info.st_uid != uid:
        import pwd  # built in; only on this refusal

        try:
            owner = pwd.getpwuid(info.st_uid).pw_name
        except KeyError:
            owner = f"uid {info.st_uid}"
        why = f"it belongs to {owner}, not the job's user: remove it, or give a path of your own"
    if why:
        os.close(fd)
        raise OSError(1, why)


def _supervise(plan: dict, status_path: str) -> int:  # type: ignore[type-arg]
    """Run the job to its end; its exit code (negative: the signal that killed it)."""
    global _job_pgid, _log_fd, _session
    streams: dict[int, int] = {}  # the pumps' read ends -> the -o/-e file each also goes to
    stdio = (-1, -1)  # the job's stdout and stderr (-1: as inherited)
    log = os.open(plan["log_path"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.dup2(log, 1)  # our own last words (a traceback) too
    os.dup2(log, 2)
    _log_fd = log
    out_file, err_file, problem = _open_outputs(plan)
    if problem:  # as sbatch: the job does not run (the controller reads this line)
        os.write(log, f"gpuyard: cannot run {plan['argv'][0]!r}: {problem}\n".encode())
        return 127
    if plan.get("pty"):
        _session = _part("pty").Session(plan, out_file, _log_write, _tee)
    else:
        output, out_w = os.pipe()
        streams[output] = out_file
        stdio = (out_w, out_w)
        if err_file >= 0:
            errors, err_w = os.pipe()
            streams[errors] = err_file
            stdio = (out_w, err_w)
    _become_subreaper()  # before the fork: an orphan made in the job's first ms must reach us
    signal.signal(signal.SIGTERM, _on_term)
    signal.signal(signal.SIGINT, _on_term)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGALRM, _on_alarm)
    if _limit_s > 0:
        # Before the fork: interval timers are not inherited, and a failure here must happen
        # before the job exists, never leave it running unsupervised. With a warning, the
        # timer first fires at the warning, then is armed again for the rest (`_on_alarm`).
        first = _limit_s - _warn_before_s if 0 < _warn_before_s < _limit_s else _limit_s
        signal.setitimer(signal.ITIMER_REAL, first)
    tees = [fd for fd in streams.values() if fd >= 0]
    session_fds = _session.own_fds() if _session is not None else []
    own_fds = sorted({fd for fd in (*streams, *stdio, *tees, *session_fds, _log_fd) if fd > 2})
    go = _session.go_r if _session is not None else -1
    # Blocked across the fork: until the child has reset them, it is a copy of us with our
    # handlers, and a stop forwarded to it then ran our `_on_term` inside it (the stop was
    # swallowed, the job exec'd without hearing it and was SIGKILLed at the grace's end: found
    # by the chaos run). Here, one arriving meanwhile waits until `_job_pgid` is known.
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
    try:
        child = os.fork()
    except OSError:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        raise
    if child == 0:
        _run_child(plan, own_fds, stdio, go, mask)
    for fd in {*stdio} - {-1}:
        os.close(fd)  # the job's alone: its end is the pipe's end
    if _session is not None:
        _session.forked()  # it is the session leader: its group is its own already
    else:
        try:
            os.setpgid(child, child)
        except OSError:
            pass
    _job_pgid = child
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # a stop held back runs `_on_term` now
    if _stage:
        _signal_tree(_stop_signal)  # a stop that arrived before the job existed
    _reserve_status(status_path)  # while the job starts: off its start's path
    _wait(child, streams)  # the job has its output's pipes or its pty: there is always one
    _, status = os.waitpid(child, 0)
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _reap_leftovers()
    for output, tee in streams.items():  # every writer is gone: what they left, then the end
        os.set_blocking(output, False)
        while _pump(output, tee):
            pass
        os.close(output)
    if _session is not None:
        _session.finish()
    for tee in tees:
        os.close(tee)
    if _unreported:  # the disk may have room again by now
        _log_write(b"")
    return os.waitstatus_to_exitcode(status)


def main(jobdir: str) -> None:
    global _grace_s, _limit_s, _stop_signal, _jobdir, _warn_signal, _warn_before_s
    global _log_room, _disk_reserve, _warn_target
    global _job_budget, _user_budget, _budget_uid, _check_every, _since_check
    _jobdir = jobdir
    plan = _read_launch(os.path.join(jobdir, "launch.json"))
    _grace_s = float(plan.get("grace_s", 10.0))
    _log_room = int(plan.get("log_room_bytes", -1))
    _disk_reserve = int(plan.get("disk_reserve_bytes", 0))
    _job_budget = int(plan.get("job_budget_bytes", 0))
    _user_budget = int(plan.get("user_budget_bytes", 0))
    _budget_uid = int(plan.get("budget_uid", -1))
    smaller = min(b for b in (_job_budget, _user_budget, 1 << 62) if b)
    _check_every = min(4 << 20, max(64 << 10, smaller // 64))
    _since_check = _check_every  # the first write sums
    _limit_s = float(plan.get("time_limit_s") or 0)
    _stop_signal = int(plan.get("stop_signal", 15))
    _warn_signal = int(plan.get("warn_signal") or 0)
    _warn_before_s = float(plan.get("warn_before_s") or 0)
    _warn_target = str(plan.get("warn_target") or "all")
    if not 0 < _warn_before_s < _limit_s:
        _warn_signal = 0  # no limit to warn before (spec_rules refuses such a submit)
    _write_pid(os.path.join(jobdir, "supervisor.pid"))
    status_path = plan.get("status_path") or os.path.join(jobdir, "status.json")
    try:
        code = _supervise(plan, status_path)
    except BaseException:
        _reap_leftovers()  # a bug here must not leave the job running unsupervised
        raise
    exit_code, sig = (str(code), "null") if code >= 0 else ("null", str(-code))
    # Every process of the job has been reaped by now (we are their subreaper): the kernel's
    # sums over them, sacct's MaxRSS (the largest of them) and TotalCPU.
    import resource

    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    _write_atomic(
        status_path,
        f'{{"exit_code": {exit_code}, "signal": {sig}, '
        f'"timed_out": {"true" if _timed_out else "false"}, '
        f'"stop_requested": {"true" if _stop_requested else "false"}, '
        f'"log_dropped_bytes": {_dropped}, '
        f'"max_rss_kib": {int(used.ru_maxrss)}, '
        f'"cpu_time_s": {round(used.ru_utime + used.ru_stime, 3)!r}, '
        f'"ended_at": {time.time()!r}}}\n',
    )


def _part(name: str) -> "ModuleType":
    """`supervisor_<name>` (`pty`, `serve`), loaded by the starts that need it from beside this
    file, as this file was run: its .pyc beside this .pyc (the executor compiles all three
    into the jobs folder), its source beside this source. `-I -S` puts no folder on sys.path,
    and `importlib.util` costs ~6 ms: the import system's frozen modules, loaded already, do
    it (a .pyc's magic number checked)."""
    import _frozen_importlib as bootstrap
    import _frozen_importlib_external as external

    folder, file = os.path.split(__file__)
    stem, _, ext = file.rpartition(".")
    path = os.path.join(folder, f"{stem}_{name}.{ext}")
    spec = external.spec_from_file_location(f"supervisor_{name}", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"no supervisor part at {path}")
    module = bootstrap.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


if __name__ == "__main__":
    if sys.argv[1] == "--serve":
        _part("serve").serve(main)
    else:
        main(sys.argv[1])
