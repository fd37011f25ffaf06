"""Facts -> checks: every verdict of `gpuyard doctor` and `submit --check`, decided here.

Worked example: a driver 535.104 supporting CUDA 12.2, two H200 (9.0) GPUs, and torch
2.4.0+cu124 with arch list sm_50..sm_90 give `PASS nvidia driver`, `PASS driver cuda`,
`PASS gpu 0-1`, `WARN torch cuda` (12.4 build on a 12.2 driver, see `compat`) and
`PASS torch arch sm_90`. The same torch as a CPU build: `WARN torch` ("this torch cannot use
the GPUs"). No driver at all: `INFO nvidia driver: no NVIDIA GPU/driver found`, and the
framework and disk checks still run.
"""

from __future__ import annotations

from gpuyard.doctor import compat
from gpuyard.doctor.model import (
    AmdGpuFacts,
    Check,
    DiskFacts,
    DriverFacts,
    Facts,
    FrameworkBuild,
    GpuFacts,
    PythonFacts,
    RocmFacts,
    ServerFacts,
    Status,
)  # fmt: skip

_GIB = 2**30
DISK_FAIL_GIB = 1
DISK_WARN_GIB = 10
_INSTALL_FROM = {
    "torch": "pytorch.org/get-started",
    "tensorflow": "pip install 'tensorflow[and-cuda]'",
    "jax": "pip install 'jax[cuda12]'",
}
_ROCM_INSTALL_FROM = {
    "torch": "pytorch.org/get-started, ROCm",
    "tensorflow": "pip install tensorflow-rocm",
    "jax": "pip install jax-rocm7-plugin jax-rocm7-pjrt",
}


def run_checks(facts: Facts) -> list[Check]:
    """All checks, in the order they are shown."""
    checks = driver_checks(facts.driver)
    if facts.rocm is not None:
        checks.extend(rocm_checks(facts.rocm, facts.driver))
    if facts.disk is not None:
        checks.append(disk_check(facts.disk))
    confinement = facts.confinement
    if facts.server is not None:
        checks.append(server_check(facts.server, facts.driver))
        confinement = facts.server.confinement or confinement
    if confinement:
        checks.append(confinement_check(confinement))
    checks.extend(facts.notes)
    if facts.python is not None:
        checks.extend(
            framework_checks(facts.python, facts.driver, facts.gpus_requested, facts.rocm)
        )
    return checks


def driver_checks(driver: DriverFacts) -> list[Check]:
    if driver.absent is not None:
        return [Check("nvidia driver", Status.INFO,
                      f"no NVIDIA GPU/driver found ({driver.absent}); GPU checks skipped",
                      "nothing to fix on a CPU-only machine; on a GPU machine, install the "
                      "NVIDIA driver")]  # fmt: skip
    if driver.not_loaded:
        return [Check("nvidia driver", Status.WARN,
                      f"the NVIDIA driver is installed but not loaded ({driver.error})",
                      "run `nvidia-smi` to see why; `sudo modprobe nvidia` or reboot")]  # fmt: skip
    if driver.error is not None:
        return [Check("nvidia driver", Status.FAIL, f"NVML failed: {driver.error}",
                      "run `nvidia-smi`; after a driver upgrade, reboot")]  # fmt: skip
    version = driver.driver_version or "n/a"
    checks = [
        Check(
            "nvidia driver",
            Status.PASS if driver.driver_version else Status.WARN,
            f"driver {version}, {len(driver.gpus)} GPU(s)",
            "" if driver.driver_version else "the driver did not report its version",
        )
    ]
    if driver.cuda_version is None:
        checks.append(
            Check(
                "driver cuda",
                Status.WARN,
                "supported CUDA version: n/a",
                "the driver is too old to report it: upgrade the NVIDIA driver",
            )
        )
    else:
        supported = compat.cuda_text(driver.cuda_version)
        checks.append(
            Check("driver cuda", Status.PASS, f"the driver supports CUDA up to {supported}")
        )
    checks.extend(gpu_checks(driver.gpus))
    if driver.gpus:
        checks.append(persistence_check(driver.gpus))
    return checks  # fmt: skip


def gpu_checks(gpus: tuple[GpuFacts, ...]) -> list[Check]:
    """One line per group of GPUs with the same name and compute capability."""
    checks = []
    for (name, cc), indices in _groups(gpus).items():
        label = f"gpu {_ranges(indices)}"
        if cc is None:
            checks.append(
                Check(
                    label,
                    Status.WARN,
                    f"{name}, compute capability n/a",
                    "the driver did not report it; arch checks skipped",
                )
            )
        else:
            checks.append(
                Check(
                    label,
                    Status.PASS,
                    f"{name}, compute capability {cc[0]}.{cc[1]} (sm_{cc[0]}{cc[1]})",
                )
            )
    return checks  # fmt: skip


def persistence_check(gpus: tuple[GpuFacts, ...]) -> Check:
    off = [g.index for g in gpus if g.persistence_mode is False]
    unknown = [g.index for g in gpus if g.persistence_mode is None]
    if off:
        return Check("persistence mode", Status.WARN, f"off on GPU {_ranges(off)}",
                     "`sudo nvidia-smi -pm 1`: otherwise every job start re-initialises the "
                     "driver (seconds)")  # fmt: skip
    if unknown:
        return Check(
            "persistence mode",
            Status.WARN,
            f"n/a on GPU {_ranges(unknown)}",
            "the driver does not report it; check with `nvidia-smi -q | grep Persistence`",
        )
    return Check("persistence mode", Status.PASS, "on for every GPU")


def disk_check(disk: DiskFacts) -> Check:
    name = "state dir disk"
    if disk.error is not None or disk.free_bytes is None:
        return Check(
            name,
            Status.FAIL,
            f"{disk.path}: {disk.error or 'free space n/a'}",
            "choose a state dir that exists or can be created (--state-dir)",
        )
    if not disk.writable:
        return Check(
            name,
            Status.FAIL,
            f"{disk.path} is not writable by this user",
            "fix its permissions or choose another --state-dir",
        )
    free_gib = disk.free_bytes / _GIB
    message = f"{free_gib:.1f} GiB free in {disk.path}"
    if free_gib < DISK_FAIL_GIB:
        return Check(
            name, Status.FAIL, message, "free space: job logs and the database cannot be written"
        )
    if free_gib < DISK_WARN_GIB:
        return Check(
            name,
            Status.WARN,
            message,
            f"free space: under {DISK_WARN_GIB} GiB, job logs may fill it",
        )
    return Check(name, Status.PASS, message)  # fmt: skip


def server_check(server: ServerFacts, driver: DriverFacts) -> Check:
    name = "server nvml"
    if not server.reachable:
        return Check(name, Status.INFO, f"not checked: {server.error}")
    seen = f"server at {server.url}: {server.gpus_source}"
    local = len(driver.gpus) if driver.usable else 0
    if server.detected_gpus:
        return Check(name, Status.PASS, seen)
    if local:
        return Check(name, Status.WARN, f"{seen}, though NVML here sees {local} GPU(s)",
                     "restart the server with `--gpus auto` in an environment that sees the "
                     "driver (LD_LIBRARY_PATH, container GPU access)")  # fmt: skip
    return Check(name, Status.INFO, seen)


def confinement_check(confinement: str) -> Check:
    """Whether the server's jobs are held to their --mem, --cpus and GPUs by the kernel."""
    if confinement.startswith("none"):
        return Check("job limits", Status.WARN, f"not enforced: {confinement}",
                     "run the server as root (a systemd unit) on a machine with cgroups, so "
                     "that each job gets its own")  # fmt: skip
    return Check("job limits", Status.PASS, confinement)


def framework_checks(
    python: PythonFacts,
    driver: DriverFacts,
    gpus_requested: int | None = None,
    rocm: RocmFacts | None = None,
) -> list[Check]:
    if python.error is not None:
        return [
            Check(
                "python",
                Status.FAIL,
                f"cannot run {python.executable}: {python.error}",
                "give the interpreter the job runs with (its venv's bin/python)",
            )
        ]
    checks = [Check("python", Status.PASS, f"Python {python.version} at {python.executable}")]
    for build in python.frameworks:
        checks.extend(build_checks(build, driver, gpus_requested, rocm))
    return checks


def build_checks(
    build: FrameworkBuild,
    driver: DriverFacts,
    gpus_requested: int | None = None,
    rocm: RocmFacts | None = None,
) -> list[Check]:
    """The build line of one framework, then its CUDA and architecture verdicts (its ROCm
    ones for a ROCm build on a machine with AMD GPUs, `rocm`)."""
    name = build.name
    if not build.installed:
        return [Check(name, Status.INFO, "not installed")]
    if build.error is not None:
        return [Check(name, Status.FAIL, f"{build.version or ''} installed but broken: "
                      f"{build.error}".lstrip(),
                      f"reinstall {name} in this environment")]  # fmt: skip
    # A job asking for no GPU never touches CUDA: its build cannot fail it.
    gpus = driver.gpus if driver.usable and gpus_requested != 0 else ()
    wants_gpus = bool(gpus) if gpus_requested is None else gpus_requested > 0
    label = f"{name} {build.version or '(version n/a)'}"
    amd = rocm.gpus if rocm is not None and rocm.usable and gpus_requested != 0 else ()
    if amd and build.rocm is not None:
        return rocm_build_checks(build, rocm, amd) if rocm is not None else []
    if amd and not gpus and (gpus_requested is None or gpus_requested > 0):
        kind = "a CUDA build" if build.cuda is not None else "a CPU-only build"
        return [Check(name, Status.WARN, f"{label}: {kind}, this {name} cannot use the AMD GPUs",
                      f"install a ROCm build ({_ROCM_INSTALL_FROM.get(name, name)})")]  # fmt: skip
    if build.rocm is not None:
        status = Status.WARN if wants_gpus else Status.INFO
        return [
            Check(
                name,
                status,
                f"{label}: a ROCm (AMD) build, it cannot use NVIDIA GPUs",
                f"install a CUDA build of {name}" if wants_gpus else "",
            )
        ]
    if build.cuda is None:
        if wants_gpus:
            upto = (
                f" for CUDA <= {compat.cuda_text(driver.cuda_version)}"
                if (driver.cuda_version and driver.usable)
                else ""
            )
            return [
                Check(
                    name,
                    Status.WARN,
                    f"{label}: CPU-only build, this {name} cannot use the GPUs",
                    f"install a CUDA build{upto} ({_INSTALL_FROM.get(name, name)})",
                )
            ]
        return [Check(name, Status.PASS, f"{label}: CPU-only build (no GPU to use here)")]
    checks = [Check(name, Status.PASS, f"{label}: {_build_text(build)}")]
    cuda = compat.parse_cuda(build.cuda)
    if cuda is None or not gpus or driver.cuda_version is None:
        return checks
    status, message = compat.cuda_verdict(cuda, driver.cuda_version)
    checks.append(Check(f"{name} cuda", status, message, _cuda_hint(name, status, build, driver)))
    if build.archs is not None:
        checks.extend(_arch_checks(build, gpus, ptx_jit_ok=status is Status.PASS))
    if build.cuda_available is False and all(c.status is Status.PASS for c in checks):
        checks.append(Check(f"{name} runtime", Status.WARN,
                            f"{name}.cuda.is_available() is False although the build fits",
                            "check CUDA_VISIBLE_DEVICES and `python -c 'import torch; "
                            "torch.cuda.init()'` for the reason"))  # fmt: skip
    return checks


def rocm_checks(rocm: RocmFacts, driver: DriverFacts) -> list[Check]:
    """The AMD side: amdgpu driver, ROCm runtime, one line per group of like GPUs. Nothing when
    there is no AMD GPU on a machine with NVIDIA ones (every NVIDIA machine)."""
    if rocm.absent is not None:
        if driver.absent is None:
            return []
        return [Check("amd driver", Status.INFO,
                      f"no AMD GPU/driver found ({rocm.absent}); AMD checks skipped",
                      "nothing to fix on a CPU-only machine; on an AMD GPU machine, install "
                      "ROCm (the amdgpu driver and amd-smi-lib)")]  # fmt: skip
    if rocm.error is not None:
        return [Check("amd driver", Status.FAIL, f"amdsmi failed: {rocm.error}",
                      "run `amd-smi list`; `sudo modprobe amdgpu`, or reboot after a driver "
                      "upgrade")]  # fmt: skip
    checks = [
        Check("amd driver", Status.PASS if rocm.driver_version else Status.WARN,
              f"amdgpu {rocm.driver_version or 'n/a'}, {len(rocm.gpus)} GPU(s)",
              "" if rocm.driver_version else "amdsmi did not report the driver's version"),
    ]  # fmt: skip
    if rocm.rocm_version:
        checks.append(Check("rocm", Status.PASS, f"ROCm runtime {rocm.rocm_version}"))
    else:
        checks.append(Check("rocm", Status.WARN,
                            f"ROCm runtime version n/a ({rocm.rocm_error or 'not reported'})",
                            "install ROCm's rocm-core (or rely on your framework's wheels, "
                            "which bring their own runtime)"))  # fmt: skip
    for (name, gfx), indices in _amd_groups(rocm.gpus).items():
        label = f"amd gpu {_ranges(indices)}"
        if gfx is None:
            checks.append(Check(label, Status.WARN, f"{name}, gfx target n/a",
                                "amdsmi did not report it; arch checks skipped"))  # fmt: skip
        else:
            checks.append(Check(label, Status.PASS, f"{name}, {gfx}"))
    return checks


def rocm_build_checks(
    build: FrameworkBuild, rocm: RocmFacts, gpus: tuple[AmdGpuFacts, ...]
) -> list[Check]:
    """A ROCm build on a machine with AMD GPUs: its line, its ROCm against the machine's, and
    whether it has kernels for each GPU's gfx target (`compat`'s rules)."""
    name = build.name
    label = f"{name} {build.version or '(version n/a)'}"
    archs = build.archs if build.archs and compat.is_gfx_list(build.archs) else None
    text = f"ROCm {build.rocm}" + (f", {compat.gfx_span(archs)}" if archs else "")
    checks = [Check(name, Status.PASS, f"{label}: {text}")]
    built, have = compat.parse_rocm(build.rocm), compat.parse_rocm(rocm.rocm_version)
    if built is not None and have is not None:
        status, message = compat.rocm_verdict(built, have)
        hint = "" if status is Status.PASS else (
            f"update ROCm and the amdgpu driver to {compat.cuda_text(built)}, or install {name} "
            f"built for ROCm <= {compat.cuda_text(have)}")  # fmt: skip
        checks.append(Check(f"{name} rocm", status, message, hint))
    for (gpu_name, gfx), indices in _amd_groups(gpus).items():
        if gfx is None:
            continue
        where = f"AMD GPU {_ranges(indices)} ({gpu_name})"
        if archs is not None:
            status, message = compat.gfx_verdict(archs, gfx)
        elif name == "jax" and built is not None and built[0] in compat.JAX_ROCM_TARGETS:
            known = gfx in compat.JAX_ROCM_TARGETS[built[0]]
            status = Status.PASS if known else Status.WARN
            message = (f"{gfx} is a target of AMD's JAX builds for ROCm {built[0]}" if known
                       else f"{gfx} is not among the targets of AMD's JAX builds for ROCm "
                       f"{built[0]}")  # fmt: skip
        else:
            continue
        hint = ""
        if status is Status.FAIL:
            hint = (f"install a {name} ROCm build whose arch list includes {gfx} (usually a "
                    f"newer ROCm build: {_ROCM_INSTALL_FROM.get(name, name)})")  # fmt: skip
        elif status is Status.WARN:
            hint = (f"install a {name} build with {gfx} kernels" if archs is not None
                    else "check AMD's ROCm compatibility matrix for this GPU")  # fmt: skip
        checks.append(Check(f"{name} arch {gfx}", status, f"{where}: {message}", hint))
    if build.cuda_available is False and all(c.status is Status.PASS for c in checks):
        checks.append(Check(f"{name} runtime", Status.WARN,
                            f"{name}.cuda.is_available() is False although the build fits",
                            "check ROCR_VISIBLE_DEVICES, that the user may open /dev/kfd and "
                            "/dev/dri (the video and render groups), and `python -c 'import "
                            "torch; torch.cuda.init()'` for the reason"))  # fmt: skip
    return checks


def _amd_groups(gpus: tuple[AmdGpuFacts, ...]) -> dict[tuple[str, str | None], list[int]]:
    groups: dict[tuple[str, str | None], list[int]] = {}
    for gpu in gpus:
        groups.setdefault((gpu.name, gpu.gfx), []).append(gpu.index)
    return groups


def _arch_checks(
    build: FrameworkBuild, gpus: tuple[GpuFacts, ...], ptx_jit_ok: bool
) -> list[Check]:
    archs = build.archs or ()
    checks = []
    for (gpu_name, cc), indices in _groups(gpus).items():
        if cc is None:
            continue
        status, message = compat.arch_verdict(archs, cc, ptx_jit_ok)
        hint = ""
        if status is Status.WARN:
            hint = f"install a {build.name} build with sm_{cc[0]}{cc[1]} kernels to start faster"
        elif status is Status.FAIL:
            hint = (f"install a {build.name} build whose arch list includes sm_{cc[0]}{cc[1]} "
                    "(usually a newer CUDA build)")  # fmt: skip
        checks.append(Check(f"{build.name} arch sm_{cc[0]}{cc[1]}", status,
                            f"GPU {_ranges(indices)} ({gpu_name}): {message}", hint))  # fmt: skip
    return checks


def _cuda_hint(name: str, status: Status, build: FrameworkBuild, driver: DriverFacts) -> str:
    if status is Status.PASS or driver.cuda_version is None:
        return ""
    have = compat.cuda_text(driver.cuda_version)
    return (f"upgrade the NVIDIA driver to one supporting CUDA >= {build.cuda}, or install "
            f"{name} built for CUDA <= {have}")  # fmt: skip


def _build_text(build: FrameworkBuild) -> str:
    parts = [f"CUDA {build.cuda}"]
    parts.append(f"cuDNN {build.cudnn or 'n/a'}")
    parts.append(f"NCCL {build.nccl or 'n/a'}")
    if build.archs is not None:
        parts.append(compat.span(build.archs))
    return ", ".join(parts)


def _groups(
    gpus: tuple[GpuFacts, ...],
) -> dict[tuple[str, tuple[int, int] | None], list[int]]:
    groups: dict[tuple[str, tuple[int, int] | None], list[int]] = {}
    for gpu in gpus:
        groups.setdefault((gpu.name, gpu.compute_capability), []).append(gpu.index)
    return groups


def _ranges(indices: list[int]) -> str:
    """[0, 1, 2, 5] -> "0-2,5"."""
    out: list[str] = []
    start = prev = None
    for i in sorted(indices):
        if start is not None and prev is not None and i == prev + 1:
            prev = i
            continue
        if start is not None:
            out.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = i
    if start is not None:
        out.append(str(start) if start == prev else f"{start}-{prev}")
    return ",".join(out)
