"""gpuyard's `srun` inside a job (`srun.sh`, POSIX sh), with the one `scontrol` command batch
scripts use (`scontrol.sh`: `show hostnames`): written where every job's user can run them, and
put on the PATH of the jobs that want them (`LaunchPlan.srun_shim`).

On a root server the job runs as its owner and gpuyard's own virtualenv (under root's home) is
out of its reach, so the shim needs nothing of gpuyard: it is a shell script, 0755, in a 0755
folder of the jobs folder (0711 on such a server: reached by path, never listed). A real
Slurm's `srun` on the server's PATH wins: then no shim is put on any job's PATH.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Mapping
from pathlib import Path

SHIM_SOURCE = Path(__file__).with_name("srun.sh")
# What the folder holds: each program's name and its text's file here.
PROGRAMS = {"srun": SHIM_SOURCE, "scontrol": Path(__file__).with_name("scontrol.sh")}
SHIM_FOLDER = ".bin"
# A Ray job's environment carries this to its nodes (each writes the shim itself); taken out
# before the job starts.
SRUN_WANTED = "GPUYARD_SRUN_SHIM"


def real_srun(path: str | None = None) -> str | None:
    """A real Slurm's `srun` on `path` (None: the server's PATH), if there is one."""
    return shutil.which("srun", path=path if path is not None else os.environ.get("PATH"))


def install_srun(folder: Path) -> str:
    """Write `srun` and `scontrol` into `folder` (made 0755 when missing), each whole or not
    at all (a job that starts meanwhile runs the old one or the new one); returns the folder."""
    folder.mkdir(mode=0o755, exist_ok=True)
    os.chmod(folder, 0o755)
    for name, source in PROGRAMS.items():
        tmp = folder / f".{name}.{os.getpid()}.tmp"
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o755)
        try:
            os.write(fd, source.read_bytes())
            os.fchmod(fd, 0o755)
        finally:
            os.close(fd)
        os.replace(tmp, folder / name)
    return str(folder)


def with_srun(env: Mapping[str, str], folder: str | None) -> dict[str, str]:
    """The job's environment with the shim's folder last on PATH: an `srun` the user's own
    PATH holds comes first (a login node's real Slurm, say)."""
    out = dict(env)
    if folder is None:
        return out
    path = out.get("PATH", "")
    if folder not in path.split(":"):
        out["PATH"] = f"{path}:{folder}" if path else folder
    return out


def prepare_srun(jobs_dir: Path) -> str | None:
    """At the executor's start: the shim's folder in `jobs_dir`, written now; None where a
    real `srun` is on the server's PATH (jobs use that one)."""
    if real_srun() is not None:
        return None
    return install_srun(jobs_dir / SHIM_FOLDER)
