"""The doctor's facts (what was found) and checks (what it means). Standard library only."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum


class Status(StrEnum):
    """PASS: fine. WARN: works, with a cost or a risk. FAIL: will not work. INFO: a fact."""

    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"
    INFO = "info"


@dataclass(frozen=True, slots=True)
class Check:
    """One verdict: a one-line message and, unless it passed, a one-line fix hint."""

    name: str
    status: Status
    message: str
    hint: str = ""

    def to_json(self) -> dict[str, str]:
        return {"name": self.name, "status": self.status.value, "message": self.message,
                "hint": self.hint}  # fmt: skip


@dataclass(frozen=True, slots=True)
class GpuFacts:
    index: int
    name: str
    compute_capability: tuple[int, int] | None  # None: NVML could not tell
    persistence_mode: bool | None  # None: n/a


@dataclass(frozen=True, slots=True)
class DriverFacts:
    """What NVML says. `absent`: no NVIDIA driver at all; `error`: there is one, but broken."""

    absent: str | None = None  # why there is no driver (plain words)
    error: str | None = None  # NVML is there but failed (a FAIL)
    not_loaded: bool = False  # the library is installed, the kernel module is not running
    driver_version: str | None = None
    cuda_version: tuple[int, int] | None = None  # the highest CUDA the driver supports
    gpus: tuple[GpuFacts, ...] = ()

    @property
    def usable(self) -> bool:
        return self.absent is None and self.error is None and not self.not_loaded


@dataclass(frozen=True, slots=True)
class AmdGpuFacts:
    index: int  # amdsmi's
    name: str
    gfx: str | None  # the gfx target ("gfx942"); None: amdsmi could not tell


@dataclass(frozen=True, slots=True)
class RocmFacts:
    """What amdsmi says (AMD GPUs). `absent`: no AMD GPU/library; `error`: there, but broken."""

    absent: str | None = None
    error: str | None = None
    driver_version: str | None = None  # the amdgpu kernel driver's
    rocm_version: str | None = None  # the ROCm runtime's (librocm-core), "6.4.1"
    rocm_error: str | None = None  # why the ROCm version is n/a
    gpus: tuple[AmdGpuFacts, ...] = ()

    @property
    def usable(self) -> bool:
        return self.absent is None and self.error is None


@dataclass(frozen=True, slots=True)
class FrameworkBuild:
    """How one installed framework was built, as its own interpreter reports it."""

    name: str  # torch, tensorflow, jax
    installed: bool
    version: str | None = None
    cuda: str | None = None  # "12.4", "12" (major only), None: CPU-only build
    cudnn: str | None = None
    nccl: str | None = None
    archs: tuple[str, ...] | None = None  # ("sm_80", "sm_90", "compute_90"); None: unknown
    cuda_available: bool | None = None  # torch.cuda.is_available() in that environment
    rocm: str | None = None  # a ROCm (HIP) build, for AMD GPUs: its ROCm version ("6.2")
    error: str | None = None  # installed, but it failed to import or to report


@dataclass(frozen=True, slots=True)
class PythonFacts:
    """The interpreter the framework checks ran in; `error` if it could not be run."""

    executable: str
    version: str | None = None
    error: str | None = None
    frameworks: tuple[FrameworkBuild, ...] = ()


@dataclass(frozen=True, slots=True)
class DiskFacts:
    path: str  # the state dir (or the nearest existing parent it will be made in)
    free_bytes: int | None = None
    total_bytes: int | None = None
    writable: bool = True
    error: str | None = None


@dataclass(frozen=True, slots=True)
class ServerFacts:
    """The running server's GPU source, when one answers at GPUYARD_URL."""

    url: str
    reachable: bool
    gpus_source: str | None = None
    detected_gpus: int = 0
    declared_gpus: int = 0
    error: str | None = None
    confinement: str | None = None  # the server's per-job cgroups, or why there are none


@dataclass(frozen=True, slots=True)
class Facts:
    driver: DriverFacts
    python: PythonFacts | None = None  # None: no interpreter to check (not a Python job)
    disk: DiskFacts | None = None
    server: ServerFacts | None = None
    gpus_requested: int | None = None  # submit --check: what the job asks for
    notes: tuple[Check, ...] = field(default=())  # checks decided while gathering
    rocm: RocmFacts | None = None  # None: not asked (AMD GPUs are not checked)
    # The per-job cgroups of a machine's agent (`doctor --node`); the CLI's own machine has
    # them from the server (`server.confinement`).
    confinement: str | None = None


def summarize(checks: list[Check]) -> dict[str, int | bool]:
    counts: dict[str, int | bool] = {s.value: 0 for s in Status}
    for check in checks:
        counts[check.status.value] = int(counts[check.status.value]) + 1
    counts["ok"] = counts[Status.FAIL.value] == 0
    return counts
