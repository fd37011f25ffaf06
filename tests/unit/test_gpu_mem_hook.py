"""`--gpu-mem` soft enforcement: the job-side `sitecustomize` caps PyTorch's CUDA allocator.

Every test runs a real Python subprocess with the hook first on PYTHONPATH, as the server
starts a job. There is no GPU and no CUDA build of torch here, so most tests use a stand-in
`torch` package that keeps real PyTorch's lazy-init contract (`_lazy_call` queues callables that
`_lazy_init` runs at the first CUDA use, with the same re-entrancy guard and the same
DeferredCudaCallError wrapping), and one test runs the real CPU torch installed in the venv.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gpuyard.jobhooks import HOOK_DIR

HOOK_FILE = Path(HOOK_DIR) / "sitecustomize.py"

FAKE_TORCH_INIT = """\
from torch import cuda as cuda


def zeros(n, device="cpu"):
    # Like the real torch.zeros(..., device="cuda"): the first CUDA use runs _lazy_init().
    if str(device).startswith("cuda"):
        cuda._lazy_init()
    return [0.0] * n
"""

# Modelled on torch 2.13's torch/cuda/__init__.py: _lazy_call, _lazy_init, _queued_calls,
# _tls.is_initializing, DeferredCudaCallError; set_per_process_memory_fraction comes from
# .memory at the very end of the module, as in the real one.
FAKE_TORCH_CUDA_INIT = """\
import os
import threading
import traceback

_initialized = False
_tls = threading.local()
_initialization_lock = threading.Lock()
_queued_calls = []


def _log(*parts):
    print("FAKE", *parts, flush=True)


def is_initialized():
    return _initialized


def _lazy_call(callable, **kwargs):
    with _initialization_lock:
        if is_initialized():
            callable()
        else:
            _queued_calls.append((callable, traceback.format_stack()))


class DeferredCudaCallError(Exception):
    pass


def _lazy_init():
    global _initialized
    if is_initialized() or hasattr(_tls, "is_initializing"):
        return
    with _initialization_lock:
        if is_initialized():
            return
        _log("lazy_init")
        _tls.is_initializing = True
        try:
            for queued_call, orig_traceback in _queued_calls:
                try:
                    queued_call()
                except Exception as e:
                    raise DeferredCudaCallError("CUDA call failed lazily: " + str(e)) from e
        finally:
            delattr(_tls, "is_initializing")
        _initialized = True


def device_count():
    return int(os.environ.get("FAKE_CUDA_DEVICES", "2"))


class _Properties:
    def __init__(self, total_memory):
        self.total_memory = total_memory


def get_device_properties(device=None):
    _lazy_init()
    if device < 0 or device >= device_count():
        raise AssertionError("Invalid device id")
    return _Properties(int(os.environ.get("FAKE_CUDA_TOTAL_MIB", "81920")) * 2**20)


from .memory import *  # noqa

if os.environ.get("FAKE_OLD_TORCH"):
    del _lazy_call
if os.environ.get("FAKE_EAGER_INIT"):
    _lazy_init()  # CUDA is already up when the hook registers: _lazy_call runs it at once
"""

FAKE_TORCH_CUDA_MEMORY = """\
import os

from . import _lazy_init, _log

__all__ = ["set_per_process_memory_fraction"]


def set_per_process_memory_fraction(fraction, device=None):
    _lazy_init()
    if os.environ.get("FAKE_CUDA_BROKEN"):
        raise RuntimeError("CUDA driver said no")
    if not isinstance(fraction, float):
        raise TypeError("Invalid type for fraction argument, must be `float`")
    if fraction < 0 or fraction > 1:
        raise ValueError("Invalid fraction value")
    _log("fraction", device, fraction)
"""

GIB = 1024  # MiB


@pytest.fixture(scope="module")
def fake_torch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("fake_torch")
    (root / "torch" / "cuda").mkdir(parents=True)
    (root / "torch" / "__init__.py").write_text(FAKE_TORCH_INIT)
    (root / "torch" / "cuda" / "__init__.py").write_text(FAKE_TORCH_CUDA_INIT)
    (root / "torch" / "cuda" / "memory.py").write_text(FAKE_TORCH_CUDA_MEMORY)
    return root


def run_job(
    script: str, pythonpath: list[Path | str], cwd: Path, **env: str
) -> subprocess.CompletedProcess[str]:
    """Start `python -c script` the way the server starts a job with --gpu-mem."""
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("GPUYARD_", "FAKE_")) and k != "PYTHONPATH"
    }
    base["PYTHONPATH"] = os.pathsep.join(str(p) for p in [HOOK_DIR, *pythonpath])
    base.update(env)
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        cwd=cwd,
        env=base,
        capture_output=True,
        text=True,
        timeout=120,
    )


def fake_lines(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if line.startswith("FAKE")]


FIRST_CUDA_USE = """
    import os
    import torch
    print("imported", flush=True)
    torch.zeros(2, device="cuda")
    torch.zeros(2, device="cuda")
    torch.cuda._lazy_init()
    print("applied", os.environ.get("GPUYARD_GPU_MEM_CAP_APPLIED"), flush=True)
"""


def test_the_hook_dir_holds_the_sitecustomize() -> None:
    assert os.path.isabs(HOOK_DIR)
    assert HOOK_FILE.is_file()
    assert sorted(p.name for p in Path(HOOK_DIR).glob("*.py")) == ["sitecustomize.py"]


def test_the_hook_parses_as_python_3_8() -> None:
    # A job may run any interpreter; the hook must not use syntax newer than 3.8.
    ast.parse(HOOK_FILE.read_text(), filename=str(HOOK_FILE), feature_version=(3, 8))


def test_the_first_cuda_use_caps_every_visible_device_and_says_so_once(
    fake_torch: Path, tmp_path: Path
) -> None:
    done = run_job(
        FIRST_CUDA_USE,
        [fake_torch],
        tmp_path,
        GPUYARD_GPU_MEM_CAP_MIB="8192",
        FAKE_CUDA_DEVICES="2",
        FAKE_CUDA_TOTAL_MIB=str(80 * GIB),
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "imported",
        "FAKE lazy_init",
        "FAKE fraction 0 0.1",
        "FAKE fraction 1 0.1",
        "applied 0.1",
    ]
    assert done.stderr.splitlines() == [
        "gpuyard: GPU memory capped at 8192 MiB per process (fraction 0.1 of 81920 MiB)"
    ]


def test_importing_torch_initialises_no_cuda(fake_torch: Path, tmp_path: Path) -> None:
    done = run_job(
        """
        import os
        import torch
        names = [c.__name__ for c, _ in torch.cuda._queued_calls]
        print(names, torch.cuda._initialized, os.environ.get("GPUYARD_GPU_MEM_CAP_APPLIED"))
        # The loader wrapper is gone once torch.cuda has run.
        print(type(torch.cuda.__loader__).__name__, type(torch.cuda.__spec__.loader).__name__)
        """,
        [fake_torch],
        tmp_path,
        GPUYARD_GPU_MEM_CAP_MIB="8192",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "['_gpuyard_apply_gpu_mem_cap'] False None",
        "SourceFileLoader SourceFileLoader",
    ]
    assert fake_lines(done.stdout) == []
    assert done.stderr == ""


@pytest.mark.parametrize("cap", [None, "", "  ", "8GiB", "1.5", "0", "-5"])
def test_without_a_valid_cap_nothing_is_set_and_nothing_printed(
    fake_torch: Path, tmp_path: Path, cap: str | None
) -> None:
    env = {} if cap is None else {"GPUYARD_GPU_MEM_CAP_MIB": cap}
    done = run_job(FIRST_CUDA_USE, [fake_torch], tmp_path, **env)
    assert done.returncode == 0, done.stderr
    assert fake_lines(done.stdout) == ["FAKE lazy_init"]
    assert "applied None" in done.stdout
    assert done.stderr == ""


def test_a_cap_above_the_device_size_is_fraction_one(fake_torch: Path, tmp_path: Path) -> None:
    done = run_job(
        FIRST_CUDA_USE,
        [fake_torch],
        tmp_path,
        GPUYARD_GPU_MEM_CAP_MIB=str(200 * GIB),
        FAKE_CUDA_DEVICES="1",
        FAKE_CUDA_TOTAL_MIB=str(80 * GIB),
    )
    assert done.returncode == 0, done.stderr
    assert fake_lines(done.stdout) == ["FAKE lazy_init", "FAKE fraction 0 1.0"]
    assert "applied 1.0" in done.stdout
    assert done.stderr.splitlines() == [
        "gpuyard: GPU memory capped at 204800 MiB per process (fraction 1.0 of 81920 MiB)"
    ]


def test_a_job_that_sees_no_gpu_gets_no_cap_and_no_message(
    fake_torch: Path, tmp_path: Path
) -> None:
    done = run_job(
        FIRST_CUDA_USE,
        [fake_torch],
        tmp_path,
        GPUYARD_GPU_MEM_CAP_MIB="8192",
        FAKE_CUDA_DEVICES="0",
    )
    assert done.returncode == 0, done.stderr
    assert fake_lines(done.stdout) == ["FAKE lazy_init"]
    assert done.stderr == ""


def test_cuda_already_initialised_when_the_hook_registers_applies_at_once_without_deadlock(
    fake_torch: Path, tmp_path: Path
) -> None:
    # _lazy_call runs the callable while holding torch's (non-reentrant) init lock; the
    # callback's own _lazy_init() calls must return before taking it.
    done = run_job(
        FIRST_CUDA_USE,
        [fake_torch],
        tmp_path,
        GPUYARD_GPU_MEM_CAP_MIB="4096",
        FAKE_CUDA_DEVICES="1",
        FAKE_CUDA_TOTAL_MIB=str(16 * GIB),
        FAKE_EAGER_INIT="1",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "FAKE lazy_init",
        "FAKE fraction 0 0.25",
        "imported",
        "applied 0.25",
    ]
    assert done.stderr.splitlines() == [
        "gpuyard: GPU memory capped at 4096 MiB per process (fraction 0.25 of 16384 MiB)"
    ]


USER_SITECUSTOMIZE = """\
import sys

MARKER = 42
print("user sitecustomize ran", __name__, flush=True)
"""


def test_the_users_own_sitecustomize_still_runs(fake_torch: Path, tmp_path: Path) -> None:
    user = tmp_path / "user_site"
    user.mkdir()
    (user / "sitecustomize.py").write_text(USER_SITECUSTOMIZE)
    done = run_job(
        FIRST_CUDA_USE + "\n    import sitecustomize\n    print('marker', sitecustomize.MARKER)",
        [fake_torch, user],
        tmp_path,
        GPUYARD_GPU_MEM_CAP_MIB="8192",
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "user sitecustomize ran sitecustomize"
    assert lines.count("user sitecustomize ran sitecustomize") == 1
    assert "FAKE fraction 1 0.1" in lines
    assert lines[-1] == "marker 42"
    assert "GPU memory capped at 8192 MiB" in done.stderr


def test_torch_imported_by_the_users_sitecustomize_is_still_capped(
    fake_torch: Path, tmp_path: Path
) -> None:
    user = tmp_path / "user_site"
    user.mkdir()
    (user / "sitecustomize.py").write_text("import torch\nprint('user imported torch')\n")
    done = run_job(FIRST_CUDA_USE, [fake_torch, user], tmp_path, GPUYARD_GPU_MEM_CAP_MIB="8192")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == "user imported torch"
    assert "FAKE fraction 0 0.1" in done.stdout


def test_a_broken_user_sitecustomize_is_reported_as_site_py_would_and_the_job_runs(
    fake_torch: Path, tmp_path: Path
) -> None:
    user = tmp_path / "user_site"
    user.mkdir()
    (user / "sitecustomize.py").write_text("raise ValueError('oops')\n")
    done = run_job(FIRST_CUDA_USE, [fake_torch, user], tmp_path, GPUYARD_GPU_MEM_CAP_MIB="8192")
    assert done.returncode == 0, done.stderr
    assert "Error in sitecustomize; set PYTHONVERBOSE for traceback:\nValueError: oops\n" in (
        done.stderr
    )
    assert "FAKE fraction 0 0.1" in done.stdout


@pytest.mark.parametrize(
    ("env", "why"),
    [
        ({"FAKE_CUDA_BROKEN": "1"}, "RuntimeError: CUDA driver said no"),
        ({"FAKE_OLD_TORCH": "1"}, "this torch has no torch.cuda._lazy_call"),
    ],
)
def test_a_cap_that_cannot_be_applied_is_one_line_and_the_job_carries_on(
    fake_torch: Path, tmp_path: Path, env: dict[str, str], why: str
) -> None:
    done = run_job(
        FIRST_CUDA_USE + "\n    print('still running')",
        [fake_torch],
        tmp_path,
        GPUYARD_GPU_MEM_CAP_MIB="8192",
        **env,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == [f"gpuyard: GPU memory cap not applied: {why}"]
    assert "FAKE lazy_init" in done.stdout
    assert done.stdout.splitlines()[-1] == "still running"


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")
def test_the_real_cpu_torch_runs_unharmed_with_the_hook_active(tmp_path: Path) -> None:
    done = run_job(
        """
        import torch
        print(torch.ones(2).sum().item())
        print("_gpuyard_apply_gpu_mem_cap" in [c.__name__ for c, _ in torch.cuda._queued_calls])
        print(type(torch.cuda.__loader__).__name__)
        """,
        [],
        tmp_path,
        GPUYARD_GPU_MEM_CAP_MIB="8192",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["2.0", "True", "SourceFileLoader"]
    assert "not applied" not in done.stderr
    assert "gpuyard:" not in done.stderr  # no CUDA: the callback never runs
