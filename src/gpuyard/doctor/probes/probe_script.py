"""Run by the interpreter being checked (`python -c`): how its frameworks were built, as JSON.

Standard library only and Python 3.6-compatible: it runs in the job's environment, not ours.
A framework is imported only if it is installed, and TensorFlow and JAX not at all (their
build facts are read from files and package metadata): only torch must be imported, for its
arch list. Prints one line, `GPUYARD-PROBE {json}`.
"""

import importlib
import importlib.util
import json
import os
import platform
import sys
from typing import Any

MARK = "GPUYARD-PROBE "


def _installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _dist_version(*names: str) -> "str | None":
    try:
        from importlib import metadata
    except ImportError:
        return None
    for name in names:
        try:
            return metadata.version(name)
        except Exception:
            continue
    return None


def _line(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__


def probe_torch() -> "dict[str, Any]":
    if not _installed("torch"):
        return {"installed": False}
    out: dict[str, Any] = {"installed": True, "version": _dist_version("torch")}
    try:
        torch: Any = importlib.import_module("torch")
    except Exception as exc:
        out["error"] = _line(exc)
        return out
    out["version"] = str(torch.__version__)
    out["cuda"] = getattr(torch.version, "cuda", None)
    out["rocm"] = getattr(torch.version, "hip", None)
    flags = getattr(torch._C, "_cuda_getArchFlags", None)
    try:
        # get_arch_list() answers [] when no GPU is usable; the build's own flags do not.
        archs = flags() if flags is not None else None
        out["archs"] = archs.split() if archs else (torch.cuda.get_arch_list() or None)
    except Exception:
        out["archs"] = None
    try:
        cudnn = torch.backends.cudnn.version()
        out["cudnn"] = int(cudnn) if cudnn else None
    except Exception:
        out["cudnn"] = None
    try:
        nccl = torch.cuda.nccl.version()
        out["nccl"] = ".".join(str(p) for p in nccl) if isinstance(nccl, tuple) else str(nccl)
    except Exception:
        out["nccl"] = None
    try:
        # A ROCm build answers through torch.cuda too (HIP behind it).
        usable = out["cuda"] or out["rocm"]
        out["cuda_available"] = bool(torch.cuda.is_available()) if usable else None
    except Exception:
        out["cuda_available"] = False
    return out


def probe_tensorflow() -> "dict[str, Any]":
    spec = importlib.util.find_spec("tensorflow") if _installed("tensorflow") else None
    if spec is None:
        return {"installed": False}
    names = ("tensorflow", "tensorflow-cpu", "tensorflow-gpu", "tf-nightly", "tensorflow-intel")
    out: dict[str, Any] = {"installed": True, "version": _dist_version(*names)}
    info: dict[str, Any] | None = None
    for root in spec.submodule_search_locations or ():
        path = os.path.join(root, "python", "platform", "build_info.py")
        if os.path.isfile(path):
            scope: dict[str, Any] = {"__name__": "build_info"}
            try:
                with open(path) as f:
                    exec(compile(f.read(), path, "exec"), scope)
                info = dict(scope.get("build_info") or {})
            except Exception:
                info = None
            break
    if info is None:
        try:
            tf: Any = importlib.import_module("tensorflow")

            out["version"] = str(tf.__version__)
            info = dict(tf.sysconfig.get_build_info())
        except Exception as exc:
            out["error"] = _line(exc)
            return out
    if info.get("is_cuda_build"):
        out["cuda"] = info.get("cuda_version")
        out["cudnn"] = info.get("cudnn_version")
        caps = info.get("cuda_compute_capabilities")
        out["archs"] = list(caps) if caps else None
    if info.get("is_rocm_build"):
        out["rocm"] = info.get("rocm_version") or "yes"
    return out


def probe_jax() -> "dict[str, Any]":
    if not _installed("jax"):
        return {"installed": False}
    jaxlib = _dist_version("jaxlib")
    out: dict[str, Any] = {"installed": True, "version": _dist_version("jax"), "jaxlib": jaxlib}
    major = None
    for m in ("13", "12", "11"):
        if _dist_version(f"jax-cuda{m}-plugin", f"jax-cuda{m}-pjrt"):
            major = m
            break
    if major is None and jaxlib and "+cuda" in jaxlib:  # old jaxlib wheels: 0.4.7+cuda12.cudnn88
        major = jaxlib.split("+cuda", 1)[1].split(".")[0]
    if major is not None:
        runtime = _dist_version(f"nvidia-cuda-runtime-cu{major}")
        out["cuda"] = ".".join(runtime.split(".")[:2]) if runtime else major
        out["cudnn"] = _dist_version(f"nvidia-cudnn-cu{major}")
        out["nccl"] = _dist_version(f"nvidia-nccl-cu{major}")
    rocm = _jax_rocm_plugin()
    if major is None and rocm is not None:
        out["rocm"] = rocm  # "7" (jax-rocm7-plugin), "60" (jax-rocm60-plugin): ROCm 6.0
    return out


def _jax_rocm_plugin() -> "str | None":
    """The ROCm of an installed JAX ROCm plugin (`jax-rocm7-plugin`, `jax-rocm60-pjrt`):
    the digits of its name."""
    try:
        from importlib import metadata
    except ImportError:
        return None
    for dist in metadata.distributions():
        name = (dist.metadata["Name"] or "").lower().replace("_", "-")
        if name.startswith("jax-rocm") and name.endswith(("-plugin", "-pjrt")):
            digits = name[len("jax-rocm") :].split("-", 1)[0]
            if digits.isdigit():
                return digits
    return None


def main() -> None:
    result: dict[str, Any] = {
        "executable": sys.executable,
        "version": platform.python_version(),
        "frameworks": {},
    }
    for name, probe in (
        ("torch", probe_torch),
        ("tensorflow", probe_tensorflow),
        ("jax", probe_jax),
    ):
        try:
            result["frameworks"][name] = probe()
        except Exception as exc:
            result["frameworks"][name] = {"installed": True, "error": _line(exc)}
    sys.stdout.write(MARK + json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
