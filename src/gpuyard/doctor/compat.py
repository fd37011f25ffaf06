"""Can a framework build run on this driver and these GPUs? The rules, with worked examples.

**CUDA version.** A build made with CUDA X.Y needs a driver whose supported CUDA version (NVML's
`nvmlSystemGetCudaDriverVersion_v2`, what `nvidia-smi` prints as "CUDA Version") is >= X.Y:

- driver 12.6, torch cu124 (12.4): PASS, drivers are backward compatible;
- driver 12.2, torch cu124: WARN. CUDA's minor-version compatibility lets a 12.4 build run on
  any 12.x driver, but not features the 12.2 driver lacks, and it cannot JIT-compile PTX newer
  than itself (see below): upgrade the driver or install a cu122 build;
- driver 11.8, torch cu121: FAIL, a newer major never runs on an older driver;
- driver 12.6, torch cu118: PASS (an 11.x build runs on a 12.x driver).
A version known only by its major ("12", a JAX CUDA plugin) is compared by major alone.

**GPU architecture.** Builds carry machine code (cubins, `sm_XY`) and portable code (PTX,
`compute_XY`) for a list of architectures (`torch.cuda.get_arch_list()`,
TensorFlow's `cuda_compute_capabilities`). For a GPU of compute capability M.m:

- `sm_Mm` in the list: PASS (native kernels);
- `sm_Mk` with k < m (same major, e.g. sm_86 on an 8.9 GPU): PASS, cubins run on later minors
  of their major (not the arch-specific `sm_90a`);
- else `compute_XY` with X.Y <= M.m (e.g. only `compute_80` on a 9.0 GPU): WARN, the driver
  JIT-compiles the PTX at first use (minutes, cached) and the kernels may be slower; FAIL if
  the driver's CUDA is older than the build's, as it cannot JIT newer PTX;
- none of these (e.g. a list up to sm_90 on a 12.0 GPU): FAIL, there are no kernels for it.

**AMD GPUs (ROCm).** With worked examples.

**Architecture.** ROCm code objects are made for one gfx target each (`gfx90a` for MI210/MI250,
`gfx942` for MI300X/MI300A/MI325X, `gfx950` for MI350X/MI355X); there is no PTX-like JIT. A
torch ROCm build's arch list (`torch._C._cuda_getArchFlags()`, PYTORCH_ROCM_ARCH at build time;
entries may carry features, `gfx90a:xnack-`) decides:

- `gfx942` in the list: PASS;
- a generic target covering it (`gfx9-4-generic` covers gfx940/941/942/950, ROCm 6.3+): WARN,
  the kernels run but are not tuned for that GPU;
- neither: FAIL, HIP answers "invalid device function" / "no kernel image" at the first kernel.
JAX's ROCm plugins (`jax-rocm7-plugin`, `jax-rocm60-plugin`) publish no arch list: their
targets are those of AMD's builds for that ROCm (`JAX_ROCM_TARGETS`); another gfx is a WARN
(it may work; AMD's compatibility matrix says).

**Runtime.** A torch or JAX ROCm wheel brings its own ROCm user-space libraries, so the
machine's ROCm (librocm-core) need not match; what must is the amdgpu kernel driver, which AMD
supports for ROCm releases around its own. gpuyard checks what it can tell: a build of a newer
ROCm major than the machine's runtime is a WARN (update ROCm and the amdgpu driver, or install
a build for the machine's ROCm); an older or the same major: PASS.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpuyard.doctor.model import Status

_ARCH = re.compile(r"^(sm|compute)_(\d+)(\d)([a-z]?)$")


def parse_cuda(text: str | None) -> tuple[int, int | None] | None:
    """ "12.4" -> (12, 4); "12" -> (12, None); "12.4.1" -> (12, 4); junk or None -> None."""
    if not text:
        return None
    parts = text.strip().split(".")
    try:
        major = int(parts[0])
        minor = int(parts[1]) if len(parts) > 1 else None
    except ValueError:
        return None
    return major, minor


def cuda_text(version: tuple[int, int | None]) -> str:
    major, minor = version
    return str(major) if minor is None else f"{major}.{minor}"


def cuda_from_nvml(value: int) -> tuple[int, int]:
    """NVML's integer CUDA version (12060) as (12, 6)."""
    return value // 1000, (value % 1000) // 10


def cuda_verdict(build: tuple[int, int | None], driver: tuple[int, int]) -> tuple[Status, str]:
    """Whether a build for CUDA `build` runs on a driver supporting CUDA `driver`; why."""
    b, d = cuda_text(build), cuda_text(driver)
    if build[0] < driver[0] or (build[0] == driver[0] and (build[1] or 0) <= driver[1]):
        return Status.PASS, f"built for CUDA {b}, the driver supports up to CUDA {d}"
    if build[0] == driver[0]:
        return Status.WARN, (
            f"built for CUDA {b}, the driver supports only {d}: runs through minor-version "
            "compatibility, without newer features or PTX JIT"
        )
    return Status.FAIL, f"built for CUDA {b}, but the driver supports only CUDA {d}"


@dataclass(frozen=True, slots=True)
class Arch:
    kind: str  # "sm" (cubin) or "compute" (PTX)
    cc: tuple[int, int]
    specific: bool  # sm_90a / sm_100f: only that exact GPU family

    @property
    def text(self) -> str:
        return f"{self.kind}_{self.cc[0]}{self.cc[1]}{'a' if self.specific else ''}"


def parse_arch(entry: str) -> Arch | None:
    m = _ARCH.match(entry.strip())
    if not m:
        return None
    return Arch(m.group(1), (int(m.group(2)), int(m.group(3))), bool(m.group(4)))


def arch_verdict(
    archs: tuple[str, ...], cc: tuple[int, int], ptx_jit_ok: bool = True
) -> tuple[Status, str]:
    """Whether a build with `archs` has kernels for a GPU of compute capability `cc`; how."""
    parsed = [a for a in (parse_arch(e) for e in archs) if a is not None]
    sm = f"sm_{cc[0]}{cc[1]}"
    if any(a.kind == "sm" and a.cc == cc for a in parsed):
        return Status.PASS, f"native {sm} kernels"
    same_major = [a for a in parsed if a.kind == "sm" and not a.specific
                  and a.cc[0] == cc[0] and a.cc[1] < cc[1]]  # fmt: skip
    if same_major:
        best = max(same_major, key=lambda a: a.cc)
        return Status.PASS, f"{best.text} kernels, which run on {sm}"
    ptx = [a for a in parsed if a.kind == "compute" and not a.specific and a.cc <= cc]
    if ptx:
        best = max(ptx, key=lambda a: a.cc)
        if not ptx_jit_ok:
            return Status.FAIL, (
                f"no {sm} kernels, only {best.text} PTX, which this older driver cannot JIT"
            )
        return Status.WARN, (
            f"no {sm} kernels, only {best.text} PTX: JIT-compiled at first use (slow start)"
        )
    return Status.FAIL, f"no kernels for {sm} (has {span(archs)})"


def span(archs: tuple[str, ...]) -> str:
    """A short description of an arch list: "sm_50..sm_90, compute_90"."""
    sms = sorted((a for a in map(parse_arch, archs) if a and a.kind == "sm"), key=lambda a: a.cc)
    ptx = [a.text for a in map(parse_arch, archs) if a and a.kind == "compute"]
    parts = []
    if sms:
        parts.append(sms[0].text if len(sms) == 1 else f"{sms[0].text}..{sms[-1].text}")
    parts.extend(ptx)
    return ", ".join(parts) or "no CUDA architectures"


def format_cudnn(value: int) -> str:
    """torch's cuDNN integer as a version: 8902 -> 8.9.2 (cuDNN 8), 90100 -> 9.1.0 (9+)."""
    if value >= 10000:
        return f"{value // 10000}.{value % 10000 // 100}.{value % 100}"
    return f"{value // 1000}.{value % 1000 // 100}.{value % 100}"


# -- AMD GPUs (ROCm) ---------------------------------------------------------------------------

_GFX = re.compile(r"^gfx[0-9a-f]+$")
# Generic code-object targets (LLVM, ROCm 6.3+) and the gfx targets each runs on.
GENERIC_TARGETS: dict[str, frozenset[str]] = {
    "gfx9-generic": frozenset({"gfx900", "gfx902", "gfx904", "gfx906", "gfx909", "gfx90c"}),
    "gfx9-4-generic": frozenset({"gfx940", "gfx941", "gfx942", "gfx950"}),
    "gfx10-1-generic": frozenset({"gfx1010", "gfx1011", "gfx1012", "gfx1013"}),
    "gfx10-3-generic": frozenset({f"gfx103{i}" for i in range(7)}),
    "gfx11-generic": frozenset({"gfx1100", "gfx1101", "gfx1102", "gfx1103", "gfx1150",
                                "gfx1151", "gfx1152", "gfx1153"}),
    "gfx12-generic": frozenset({"gfx1200", "gfx1201"}),
}  # fmt: skip
# What AMD builds its JAX ROCm plugins for, by ROCm major (Instinct and Radeon Pro targets).
JAX_ROCM_TARGETS: dict[int, frozenset[str]] = {
    6: frozenset({"gfx908", "gfx90a", "gfx942", "gfx1030", "gfx1100", "gfx1101"}),
    7: frozenset({"gfx908", "gfx90a", "gfx942", "gfx950", "gfx1030", "gfx1100", "gfx1101",
                  "gfx1200", "gfx1201"}),
}  # fmt: skip


def gfx_target(entry: str) -> str:
    """An arch list entry's target: "gfx90a:xnack-" -> "gfx90a"."""
    return entry.strip().split(":", 1)[0].lower()


def gfx_verdict(archs: tuple[str, ...], gfx: str) -> tuple[Status, str]:
    """Whether a ROCm build with arch list `archs` has code objects for a `gfx` GPU; how."""
    targets = [gfx_target(a) for a in archs]
    if gfx in targets:
        return Status.PASS, f"native {gfx} kernels"
    generic = [t for t in targets if gfx in GENERIC_TARGETS.get(t, ())]
    if generic:
        return Status.WARN, f"no {gfx} kernels, only {generic[0]} ones (not tuned for it)"
    return Status.FAIL, f"no kernels for {gfx} (has {gfx_span(archs)})"


def gfx_span(archs: tuple[str, ...]) -> str:
    targets = sorted({gfx_target(a) for a in archs if a.strip()})
    return ", ".join(targets) or "no gfx targets"


def is_gfx_list(archs: tuple[str, ...]) -> bool:
    """Whether an arch list is a ROCm one (gfx targets), not CUDA's sm_XY."""
    return any(_GFX.match(gfx_target(a)) or gfx_target(a) in GENERIC_TARGETS for a in archs)


def parse_rocm(text: str | None) -> tuple[int, int | None] | None:
    """torch.version.hip "6.2.41133-dd7f95766" -> (6, 2); "7" -> (7, None); the JAX plugin's
    "60" (jax-rocm60-plugin) -> (6, 0); junk or None -> None."""
    if not text:
        return None
    head = text.strip().split("-", 1)[0]
    if head.isdigit() and len(head) == 2 and head.endswith("0") and head[0] != "1":
        return int(head[0]), 0
    return parse_cuda(head)


def rocm_verdict(
    build: tuple[int, int | None], machine: tuple[int, int | None]
) -> tuple[Status, str]:
    """Whether a ROCm `build` suits a machine whose ROCm runtime is `machine`."""
    b, m = cuda_text(build), cuda_text(machine)
    if build[0] <= machine[0]:
        return Status.PASS, f"built for ROCm {b}, this machine has ROCm {m}"
    return Status.WARN, (
        f"built for ROCm {b}, this machine has ROCm {m}: the wheel brings its own runtime, but "
        "the amdgpu driver may be too old for it"
    )
