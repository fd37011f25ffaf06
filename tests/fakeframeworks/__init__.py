"""A stand-in `torch` package, to check framework builds we cannot install here.

`write_fake_torch(dir, ...)` writes `dir/torch/` exposing what gpuyard's framework probe reads
(`__version__`, `version.cuda`, `version.hip`, `_C._cuda_getArchFlags()`,
`backends.cudnn.version()`, `cuda.nccl.version()`, `cuda.is_available()`); put `dir` first on
PYTHONPATH. With `broken=` set, importing it raises that ImportError message instead.
"""

from __future__ import annotations

from pathlib import Path

_INIT = """\
import types
{raise_line}
__version__ = {version!r}
version = types.SimpleNamespace(cuda={cuda!r}, hip=None)
_C = types.SimpleNamespace(_cuda_getArchFlags=lambda: {archs!r})
backends = types.SimpleNamespace(cudnn=types.SimpleNamespace(version=lambda: {cudnn!r}))
cuda = types.SimpleNamespace(
    is_available=lambda: {available!r},
    get_arch_list=lambda: [],
    nccl=types.SimpleNamespace(version=lambda: {nccl!r}),
)
"""


def write_fake_torch(
    root: Path,
    version: str = "2.1.0+cu121",
    cuda: str | None = "12.1",
    archs: str | None = "sm_50 sm_60 sm_70 sm_75 sm_80 sm_86 sm_90",
    cudnn: int | None = 8902,
    nccl: tuple[int, int, int] | None = (2, 18, 1),
    available: bool = False,
    broken: str | None = None,
) -> Path:
    """Write `root/torch/__init__.py`; returns `root` (for PYTHONPATH)."""
    package = root / "torch"
    package.mkdir(parents=True, exist_ok=True)
    raise_line = f"raise ImportError({broken!r})" if broken else ""
    (package / "__init__.py").write_text(_INIT.format(
        raise_line=raise_line, version=version, cuda=cuda, archs=archs, cudnn=cudnn,
        nccl=nccl, available=available,
    ))  # fmt: skip
    return root
