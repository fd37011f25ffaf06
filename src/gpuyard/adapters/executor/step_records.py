"""The records the in-job `srun` (`srun.sh`) leaves of each step it ran, for sacct's `JOBID.0`
rows: one file per step in the job's `steps/` folder, named by the step's number, each one line

    NUMBER NTASKS START END CODE NAME      (END and CODE `-` while the step runs)

written whole (a temporary file, then `mv`) at the step's start and again at its end; times are
epoch seconds. The folder is the job's user's own (0700), made empty for each run, inside the
server's folder; the job wrote what is in it, so it is read without following links, each file
with a size cap, at most MAX_STEPS of them, and a line that does not parse is left out.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
from pathlib import Path

from gpuyard.domain.job import MAX_STEPS, JobStep

STEPS_FOLDER = "steps"
STEPS_ENV = "GPUYARD_STEPS_DIR"  # where srun.sh writes them (unset: it records nothing)
_RECORD_BYTES = 512  # a record's line is well under this; a bigger file is not srun's
_SIGNALLED = 128  # a shell's status above this: the task was ended by signal (status - 128)


def make_steps_dir(jobdir: Path, uid: int | None, gid: int | None) -> str:
    """The run's empty steps folder, the job's user's own (`uid`/`gid`; None: the server's
    own user runs it); an earlier run's records (or whatever the job left) go first."""
    folder = jobdir / STEPS_FOLDER
    with contextlib.suppress(FileNotFoundError):
        if stat.S_ISDIR(os.lstat(folder).st_mode):
            shutil.rmtree(folder)  # links inside are removed, not followed
        else:
            folder.unlink()
    os.mkdir(folder, 0o700)
    if uid is not None and gid is not None and uid != os.geteuid():
        os.chown(folder, uid, gid, follow_symlinks=False)
    return str(folder)


def read_steps(jobdir: Path) -> tuple[JobStep, ...]:
    """The steps recorded in the job's folder, by number; () when there are none."""
    try:
        entries = list(os.scandir(jobdir / STEPS_FOLDER))
    except OSError:
        return ()
    numbered = sorted(int(e.name) for e in entries if e.name.isdigit() and len(e.name) <= 6)
    steps = []
    for number in numbered:
        if number >= MAX_STEPS:
            break
        step = _parse(_read_record(jobdir / STEPS_FOLDER / str(number)), number)
        if step is not None:
            steps.append(step)
    return tuple(steps)


def _read_record(path: Path) -> str | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # a fifo the job planted must not block us
            return None
        data = os.read(fd, _RECORD_BYTES + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    if len(data) > _RECORD_BYTES:
        return None
    return data.decode("utf-8", errors="replace")


def _parse(text: str | None, number: int) -> JobStep | None:
    """One record's first line; None unless it is well formed and names its own file's step."""
    if not text:
        return None
    fields = text.split("\n", 1)[0].split(" ", 5)
    if len(fields) != 6 or fields[0] != str(number):
        return None
    ntasks, started, ended, code, name = fields[1:]
    if not (ntasks.isdigit() and started.isdigit()) or int(ntasks) < 1:
        return None
    step = JobStep(number, name, int(ntasks), float(started))
    if ended == "-" or not ended.isdigit() or not code.isdigit():
        return step  # still running when the job ended: killed with it
    exit_code = int(code)
    return JobStep(
        number,
        name,
        step.ntasks,
        step.started_at,
        max(float(ended), step.started_at),
        exit_code,
        exit_code - _SIGNALLED if _SIGNALLED < exit_code < _SIGNALLED + 65 else None,
    )
