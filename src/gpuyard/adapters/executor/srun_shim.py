"""gpuyard's `srun` inside a job (`srun.sh`, POSIX sh), with the one `scontrol` command batch
scripts use (`scontrol.sh`: `show hostnames`): written where every job's user can run them, and
put on the PATH of the jobs that want them (`LaunchPlan.srun_shim`).

On a root server the job runs as its owner and gpuyard's own virtualenv (under root's home) is
out of its reach, so the shim needs nothing of gpuyard: it is a shell script, 0755, in a 0755
folder of the jobs folder (0711 on such a server: reached by path, never listed). The folder
goes first on the job's PATH: a gpuyard job is no Slurm allocation, so a real Slurm client on
the machine (a lab mid-migration), or a user's own `srun` wrapper that submits (`gpuyard
slurm-commands install`), would find no configuration or start a job of its own.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from pathlib import Path

SHIM_SOURCE = Path(__file__).with_name("srun.sh")
# What the folder holds: each program's name and its text's file here.
PROGRAMS = {"srun": SHIM_SOURCE, "scontrol": Path(__file__).with_name("scontrol.sh")}
SHIM_FOLDER = ".bin"


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
    """The job's environment with the shim's folder first on PATH: inside a gpuyard job its
    `srun` and `scontrol` are gpuyard's, whatever else the PATH holds."""
    out = dict(env)
    if folder is None:
        return out
    rest = [part for part in out.get("PATH", "").split(":") if part and part != folder]
    out["PATH"] = ":".join([folder, *rest])
    return out


def prepare_srun(jobs_dir: Path) -> str:
    """At the executor's start: the shim's folder in `jobs_dir`, written now."""
    return install_srun(jobs_dir / SHIM_FOLDER)
