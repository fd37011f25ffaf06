"""A fake ``libnvidia-ml.so.1`` for tests that need the real pynvml code path.

``fake_nvml.c`` (next to this file) implements a small subset of NVML with the
signatures, struct layouts and return codes of NVIDIA's ``nvml.h``.  Tests
compile it once with :func:`build_fake_nvml` and run code that imports pynvml
in a *subprocess* whose environment comes from :func:`fake_nvml_env`: the
dynamic loader reads ``LD_LIBRARY_PATH`` only at process start, so the variable
cannot be changed inside a running interpreter.

Environment variables read by the library at ``nvmlInit`` time:

``FAKE_NVML_GPUS``
    ``name|memory_total_mib|uuid[|cc]`` entries separated by ``;`` (``cc`` is
    the compute capability ``"major.minor"``, default ``"9.0"``).  Unset: two
    ``"NVIDIA Fake GPU"`` with 16384 MiB and UUIDs ``GPU-fake-0000`` and
    ``GPU-fake-0001``.  Set but empty: zero GPUs.
``FAKE_NVML_DRIVER_VERSION``
    Default ``"560.35.03"``.
``FAKE_NVML_CUDA_VERSION``
    Integer, default ``12060``.
``FAKE_NVML_FAIL_INIT``
    ``1``: ``nvmlInit`` returns ``NVML_ERROR_DRIVER_NOT_LOADED`` (9); any other
    integer ``N > 1``: ``nvmlInit`` returns ``N``.
``FAKE_NVML_STATE``
    Path to a text file re-read on every per-device call, lines
    ``index key value`` with keys ``util_gpu``, ``util_mem``, ``mem_used_mib``,
    ``temp_c``, ``power_mw``, ``power_limit_mw``, ``lost`` (non-zero makes
    every call on that GPU return ``NVML_ERROR_GPU_IS_LOST``),
    ``sm_clock_mhz``, ``mem_clock_mhz``, ``throttle`` (clocks event reasons
    bitmask), ``ecc_corrected``, ``ecc_uncorrected``, ``xid`` (last XID code),
    ``xid_events`` (XID events raised so far: each one beyond the count at
    ``nvmlDeviceRegisterEvents`` is handed out once by ``nvmlEventSetWait_v2``)
    and ``persistence`` (``nvmlDeviceGetPersistenceMode``: 0 disabled,
    non-zero enabled; default 1);
    dcgm-exporter's counters: ``mem_temp_c`` (field 82, default 45),
    ``mem_reserved_mib`` (``nvmlDeviceGetMemoryInfo_v2``'s reserved, 0),
    ``enc_util``/``dec_util`` (%), ``energy_mj`` (total energy; unset: the power x the
    seconds since the library loaded, a counter that grows), ``pcie_tx_bytes``/
    ``pcie_rx_bytes`` (fields 197/198), ``pcie_replay``, ``nvlink_links`` (field 91; 0, the
    default: no NVLink) with ``nvlink_tx_kib``/``nvlink_rx_kib`` per link (fields 138/139),
    ``remap_corr``/``remap_unc``/``remap_pending``/``remap_failure``
    (``nvmlDeviceGetRemappedRows``), ``gpm`` (GPM supported, default 1) with
    ``tensor_pct``/``gr_engine_pct``/``dram_pct`` (what ``nvmlGpmMetricsGet`` reports
    between two samples);
    and lines ``index proc PID MEM_MIB``, a compute process on that GPU.
    Write it with :func:`write_fake_nvml_state`.
``FAKE_NVML_MISSING``
    Comma-separated NVML function names (telemetry, processes, clocks, ECC,
    event sets, ``nvmlDeviceGetPersistenceMode``,
    ``nvmlDeviceGetCudaComputeCapability``,
    ``nvmlSystemGetCudaDriverVersion[_v2]``) that answer
    ``NVML_ERROR_FUNCTION_NOT_FOUND``, as with a driver too old to have them.

``fake_nvml_call_count()`` (not part of NVML) returns the number of
per-device calls answered so far, for benchmarks.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "LIB_NAME",
    "SOURCE",
    "STATE_KEYS",
    "FakeNvmlBuildError",
    "build_fake_nvml",
    "compile_library",
    "fake_nvml_env",
    "gcc_path",
    "join_gpu_spec",
    "run_json",
    "set_fake_vars",
    "write_fake_nvml_state",
    "write_state_file",
]

SOURCE = Path(__file__).with_name("fake_nvml.c")
LIB_NAME = "libnvidia-ml.so.1"
STATE_KEYS = frozenset(
    {
        "util_gpu", "util_mem", "mem_used_mib", "temp_c", "power_mw", "power_limit_mw", "lost",
        "sm_clock_mhz", "mem_clock_mhz", "throttle", "ecc_corrected", "ecc_uncorrected", "xid",
        "xid_events", "persistence",
        # dcgm-exporter's default counters (issue 24)
        "mem_temp_c", "mem_reserved_mib", "enc_util", "dec_util", "energy_mj", "pcie_tx_bytes",
        "pcie_rx_bytes", "pcie_replay", "nvlink_links", "nvlink_tx_kib", "nvlink_rx_kib",
        "remap_corr", "remap_unc", "remap_pending", "remap_failure", "gpm", "tensor_pct",
        "gr_engine_pct", "dram_pct",
    }
)  # fmt: skip
_ENV_PREFIX = "FAKE_NVML_"


class FakeNvmlBuildError(RuntimeError):
    """The fake NVML library could not be compiled."""


def gcc_path() -> str | None:
    """Path of the C compiler used by :func:`build_fake_nvml`, or None if absent."""
    return shutil.which("gcc")


def compile_library(
    out: Path, soname: str, sources: Sequence[Path], error: type[Exception], what: str
) -> None:
    """Compile ``sources`` into the shared library ``out`` (soname ``soname``), unless
    ``out`` is newer than every source. Raises ``error`` if there is no compiler or the
    compile fails; ``what`` names the library in the message."""
    newest = max(s.stat().st_mtime for s in sources)
    if out.exists() and out.stat().st_mtime > newest:
        return
    cc = gcc_path()
    if cc is None:
        raise error(f"no C compiler (gcc) on PATH; cannot build the {what}")
    # Compile to a temporary name and rename, so that concurrent builders (e.g.
    # pytest-xdist workers sharing a directory) never load a half-written library.
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    # The soname lets a process that already loaded the library by absolute
    # path satisfy a later dlopen(soname) with the same copy.
    cmd = [cc, "-shared", "-fPIC", "-O1", f"-Wl,-soname,{soname}", "-o", str(tmp)]
    try:
        proc = subprocess.run(
            [*cmd, *map(str, sources)], capture_output=True, text=True, check=False
        )
        if proc.returncode != 0:
            raise error(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr}")
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)


def build_fake_nvml(out_dir: Path) -> Path:
    """Compile ``fake_nvml.c`` to ``out_dir/libnvidia-ml.so.1``.

    Skips the compile when the library is newer than the source.  Returns the
    directory to prepend to ``LD_LIBRARY_PATH``.  Raises FakeNvmlBuildError if
    there is no compiler or the compile fails.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    compile_library(out_dir / LIB_NAME, LIB_NAME, (SOURCE,), FakeNvmlBuildError, "fake NVML")
    return out_dir


def _gpu_spec(gpu: tuple[str, int, str] | tuple[str, int, str, str]) -> str:
    fields = [str(f) for f in gpu]
    if len(fields) not in (3, 4):
        raise ValueError(f"GPU must be (name, memory_total_mib, uuid[, cc]), got {gpu!r}")
    return join_gpu_spec(gpu, "memory_total_mib")


def join_gpu_spec(gpu: Sequence[object], memory_field: str) -> str:
    """A fake library's GPU entry: ``gpu``'s fields joined by ``|``, none empty or holding
    ``|`` or ``;``, the second (``memory_field``, in MiB) a whole number."""
    fields = [str(f) for f in gpu]
    for f in fields:
        if not f or "|" in f or ";" in f:
            raise ValueError(f"empty field or '|'/';' in GPU spec {gpu!r}")
    if not fields[1].isdigit():
        raise ValueError(f"{memory_field} must be a non-negative int, got {gpu[1]!r}")
    return "|".join(fields)


def fake_nvml_env(
    lib_dir: Path,
    gpus: list[tuple[str, int, str]] | list[tuple[str, int, str, str]] | None = None,
    **extra: object,
) -> dict[str, str]:
    """Environment for a subprocess that should load the fake NVML.

    A copy of ``os.environ`` with ``lib_dir`` prepended to ``LD_LIBRARY_PATH``
    and any inherited ``FAKE_NVML_*`` variables removed.  ``gpus`` is a list of
    ``(name, memory_total_mib, uuid)`` (optionally ``+ (cc,)``, e.g. "8.0");
    None keeps the library default (two 16 GiB "NVIDIA Fake GPU"), ``[]`` means
    no GPUs.

    Keyword arguments set further variables: a lower-case name ``foo`` sets
    ``FAKE_NVML_FOO`` (e.g. ``driver_version="550.54.15"``, ``cuda_version=12040``,
    ``fail_init=True``, ``state=path``); an upper-case name is used verbatim
    (e.g. ``CUDA_VISIBLE_DEVICES="1"``).  True/False become "1"/"0", None
    removes the variable.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith(_ENV_PREFIX)}
    old = env.get("LD_LIBRARY_PATH")
    lib_dir_s = str(Path(lib_dir).resolve())
    env["LD_LIBRARY_PATH"] = f"{lib_dir_s}{os.pathsep}{old}" if old else lib_dir_s
    if gpus is not None:
        env[_ENV_PREFIX + "GPUS"] = ";".join(_gpu_spec(g) for g in gpus)
    set_fake_vars(env, _ENV_PREFIX, extra)
    return env


def set_fake_vars(env: dict[str, str], prefix: str, extra: Mapping[str, object]) -> None:
    """Set ``extra`` in ``env`` as a fake library reads them: a lower-case name ``foo``
    sets ``{prefix}FOO``, an upper-case name is used verbatim; True/False become "1"/"0",
    None removes the variable."""
    for key, value in extra.items():
        name = key if key.isupper() else prefix + key.upper()
        if value is None:
            env.pop(name, None)
        elif isinstance(value, bool):
            env[name] = "1" if value else "0"
        else:
            env[name] = os.fspath(value) if isinstance(value, os.PathLike) else str(value)


def write_fake_nvml_state(
    path: Path,
    values: Mapping[int, Mapping[str, int]],
    procs: Mapping[int, Sequence[tuple[int, int]]] | None = None,
) -> None:
    """Atomically write a FAKE_NVML_STATE file: ``{gpu_index: {key: value}}``, and the
    compute processes on each GPU as ``{gpu_index: [(pid, memory_used_mib), ...]}``."""
    write_state_file(path, values, procs, STATE_KEYS, "fake NVML")


def write_state_file(
    path: Path,
    values: Mapping[int, Mapping[str, int]],
    procs: Mapping[int, Sequence[tuple[int, int]]] | None,
    keys: frozenset[str],
    what: str,
) -> None:
    """Atomically write a fake library's state file: lines ``index key value`` (``key``
    one of ``keys``) and ``index proc PID MIB``; ``what`` names the library in errors."""
    path = Path(path)
    lines = []
    for index, kv in sorted(values.items()):
        for key, value in kv.items():
            if key not in keys:
                raise ValueError(f"unknown {what} state key {key!r}")
            if int(value) < 0:
                raise ValueError(f"negative value for {key!r}: {value!r}")
            lines.append(f"{int(index)} {key} {int(value)}\n")
    for index, listed in sorted((procs or {}).items()):
        if len(listed) > 32:
            raise ValueError(f"at most 32 processes per GPU, got {len(listed)}")
        for pid, mem_mib in listed:
            if int(pid) < 0 or int(mem_mib) < 0:
                raise ValueError(f"negative pid or memory in {(pid, mem_mib)!r}")
            lines.append(f"{int(index)} proc {int(pid)} {int(mem_mib)}\n")
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.writelines(lines)
        os.replace(tmp_name, path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise


def run_json(script: str, env: Mapping[str, str]) -> Any:
    """Run ``script`` (dedented) in a fresh interpreter with ``env`` (a fake library's: the
    loader reads it only at start); it must exit 0. Returns the JSON of its last stdout line."""
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, (
        f"rc={proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    )
    return json.loads(proc.stdout.strip().splitlines()[-1])
