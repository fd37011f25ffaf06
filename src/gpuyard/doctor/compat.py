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
