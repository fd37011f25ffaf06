"""How a Python environment's frameworks were built: the probe script, run in that interpreter.

The probe runs as a subprocess of the interpreter being checked (`python -c <probe_script>`),
with the job's environment and working directory, so `submit --check` sees what the job will
see: its venv, its PYTHONPATH, its torch.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gpuyard.doctor.compat import format_cudnn
from gpuyard.doctor.model import FrameworkBuild, PythonFacts

PROBE_TIMEOUT_S = 120.0
_MARK = "GPUYARD-PROBE "
_PYTHON_NAME = re.compile(r"^python(\d+(\.\d+)?)?$")
_FRAMEWORKS = ("torch", "tensorflow", "jax")


def probe_python(
    executable: str,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    timeout_s: float = PROBE_TIMEOUT_S,
) -> PythonFacts:
    """Run the probe with `executable`; its failure to run is a fact, not an exception."""
    source = Path(__file__).with_name("probe_script.py").read_text()
    try:
        proc = subprocess.run(
            [executable, "-c", source], env=dict(env) if env is not None else None, cwd=cwd,
            capture_output=True, text=True, timeout=timeout_s, check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return PythonFacts(executable, error=f"the framework probe took over {timeout_s:.0f} s")
    except OSError as exc:
        return PythonFacts(executable, error=exc.strerror or str(exc))
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(_MARK)]
    if proc.returncode != 0 or not lines:
        last = (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
        return PythonFacts(executable, error=f"the framework probe failed: {last[:300]}")
    data = json.loads(lines[-1][len(_MARK) :])
    found = data.get("frameworks", {})
    return PythonFacts(
        executable=str(data.get("executable") or executable),
        version=data.get("version"),
        frameworks=tuple(_build(name, found.get(name, {})) for name in _FRAMEWORKS),
    )


def _build(name: str, raw: Mapping[str, Any]) -> FrameworkBuild:
    cudnn = raw.get("cudnn")
    archs = raw.get("archs")
    return FrameworkBuild(
        name=name,
        installed=bool(raw.get("installed")),
        version=_str(raw.get("version")),
        cuda=_str(raw.get("cuda")),
        cudnn=format_cudnn(cudnn) if isinstance(cudnn, int) else _str(cudnn),
        nccl=_str(raw.get("nccl")),
        archs=tuple(str(a) for a in archs) if isinstance(archs, list) else None,
        cuda_available=raw.get("cuda_available"),
        rocm=_str(raw.get("rocm")),
        error=_str(raw.get("error")),
    )


def _str(value: object) -> str | None:
    return None if value is None or value == "" else str(value)


def job_python(
    argv: Sequence[str], env: Mapping[str, str], workdir: str
) -> tuple[str | None, str | None]:
    """The interpreter a job's frameworks load in, or (None, why not).

    `python...` as the command: that one; a script whose `#!` names a python (torchrun,
    accelerate, an executable train.py): its interpreter; else `python3` on the job's PATH.
    """
    path = env.get("PATH", os.defpath)
    first = argv[0]
    if _PYTHON_NAME.match(os.path.basename(first)):
        found = _resolve(first, path, workdir)
        return (found, None) if found else (None, f"{first} is not on the job's PATH")
    program = _resolve(first, path, workdir)
    shebang = _shebang(program) if program else None
    if shebang:
        if os.path.basename(shebang[0]) == "env" and len(shebang) > 1:
            shebang = shebang[1:]
        if _PYTHON_NAME.match(os.path.basename(shebang[0])):
            found = _resolve(shebang[0], path, workdir)
            if found:
                return found, None
            return None, f"{first} runs {shebang[0]}, which does not exist"
    fallback = shutil.which("python3", path=path)
    return (fallback, None) if fallback else (None, "no python3 on the job's PATH")


def _resolve(program: str, path: str, workdir: str) -> str | None:
    if os.sep in program:
        full = os.path.join(workdir, program)
        return full if os.access(full, os.X_OK) and os.path.isfile(full) else None
    return shutil.which(program, path=path)


def _shebang(program: str) -> list[str] | None:
    try:
        with open(program, "rb") as f:
            first = f.readline(256)
    except OSError:
        return None
    if not first.startswith(b"#!"):
        return None
    words = first[2:].decode(errors="replace").split()
    return words or None
