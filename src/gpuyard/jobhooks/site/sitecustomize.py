"""gpuyard's job hook: a job's Python output a line at a time, and a PyTorch job's CUDA
caching allocator capped at its GPU memory budget.

gpuyard puts this directory first on a job's PYTHONPATH. With GPUYARD_LINE_BUFFERED=1 (every
job whose Python can read this file) stdout and stderr are line-buffered, as at a terminal:
each line reaches the job's log as it is printed (progress streams) and in one write, so the
lines of processes sharing one stdout (torchrun's workers) never break into each other, as
they do unbuffered (PYTHONUNBUFFERED writes a print in pieces); a job that sets
PYTHONUNBUFFERED (or runs `python -u`) keeps it. With GPUYARD_GPU_MEM_CAP_MIB=<int>, Python
imports `sitecustomize` at startup, and this one:

1. installs a `sys.meta_path` finder that wraps the loader of `torch.cuda`; right after that
   module has run, it queues a callback with `torch.cuda._lazy_call`. PyTorch runs queued calls
   inside `torch.cuda._lazy_init()` (the job's first real CUDA use), so nothing here imports
   torch or initialises CUDA early: startup costs nothing and fork-based DataLoader workers work.
2. the callback calls `torch.cuda.set_per_process_memory_fraction(cap / total, i)` for every
   visible device, so an over-budget job gets its own `torch.cuda.OutOfMemoryError`, and says
   so in one line on stderr.
3. runs the `sitecustomize` that this one shadows (the next one on sys.path), if there is one.

Stdlib only, Python 3.8+ syntax (a job may use any interpreter), and it never raises: when the
cap cannot be applied it writes one line `gpuyard: GPU memory cap not applied: <why>` to stderr.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: importing typing costs startup time
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from importlib.machinery import ModuleSpec
    from types import ModuleType
    from typing import Any

_ENV_LINES = "GPUYARD_LINE_BUFFERED"
_ENV_CAP = "GPUYARD_GPU_MEM_CAP_MIB"
_ENV_APPLIED = "GPUYARD_GPU_MEM_CAP_APPLIED"
_TARGET = "torch.cuda"
_NEXT_NAME = "_gpuyard_next_sitecustomize"
_MIB = 2**20


def _real(path: str) -> str:
    return os.path.normcase(os.path.realpath(path or os.curdir))


# Every gpuyard hook directory in this process. Shared through the outermost `sitecustomize`
# so that a second gpuyard copy further down sys.path never chains back to the first one.
_gpuyard_hook_dirs: list[str] = []
_shared_dirs = getattr(sys.modules.get("sitecustomize"), "_gpuyard_hook_dirs", None)
_HOOK_DIRS: list[str] = _shared_dirs if isinstance(_shared_dirs, list) else _gpuyard_hook_dirs
_HOOK_DIRS.append(_real(os.path.dirname(os.path.abspath(__file__))))
_done: list[bool] = []  # non-empty once the cap callback has run in this process


def _say(line: str) -> None:
    try:
        err = sys.stderr
        if err is not None:
            err.write("gpuyard: " + line + "\n")
            err.flush()
    except Exception:
        pass


def _not_applied(why: object) -> None:
    if isinstance(why, BaseException):
        why = f"{type(why).__name__}: {why}"
    _say(f"GPU memory cap not applied: {why}")


def _cap_mib() -> int | None:
    raw = os.environ.get(_ENV_CAP, "").strip()
    try:
        cap = int(raw)
    except ValueError:
        return None
    return cap if cap > 0 else None


def _make_callback(cuda: ModuleType, cap_mib: int) -> Callable[[], None]:
    def _gpuyard_apply_gpu_mem_cap() -> None:
        # Runs inside torch.cuda._lazy_init() (CUDA is up, `_tls.is_initializing` is set, so the
        # `_lazy_init()` inside the calls below returns at once), or straight from `_lazy_call`
        # if CUDA is already up. Never raise: torch would turn it into a DeferredCudaCallError
        # and the job's first CUDA use would fail.
        if _done:
            return
        _done.append(True)
        try:
            applied = []
            for i in range(cuda.device_count()):
                total = int(cuda.get_device_properties(i).total_memory)
                fraction = min(1.0, cap_mib * _MIB / total)
                cuda.set_per_process_memory_fraction(fraction, i)
                applied.append((round(fraction, 4), total // _MIB))
            if not applied:
                return
            if len(set(applied)) == 1:
                fraction_, total_mib = applied[0]
                os.environ[_ENV_APPLIED] = str(fraction_)
                detail = f"fraction {fraction_} of {total_mib} MiB"
            else:
                os.environ[_ENV_APPLIED] = ",".join(str(f) for f, _ in applied)
                detail = "; ".join(
                    f"device {i}: fraction {f} of {t} MiB" for i, (f, t) in enumerate(applied)
                )
            _say(f"GPU memory capped at {cap_mib} MiB per process ({detail})")
        except Exception as exc:
            _not_applied(exc)

    return _gpuyard_apply_gpu_mem_cap


def _register(cuda: ModuleType, cap_mib: int) -> None:
    """Queue the cap with torch's lazy CUDA init; `cuda` is the just-executed `torch.cuda`."""
    try:
        lazy_call = getattr(cuda, "_lazy_call", None)
        if not callable(lazy_call):
            _not_applied("this torch has no torch.cuda._lazy_call")
            return
        lazy_call(_make_callback(cuda, cap_mib))
    except Exception as exc:
        _not_applied(exc)


class _LoaderProxy:
    """Stands in for `torch.cuda`'s loader for one `exec_module`, then puts the real one back."""

    def __init__(self, loader: Any, after: Callable[[ModuleType], None]) -> None:
        self._gpuyard_loader = loader
        self._gpuyard_after = after

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_gpuyard_"):
            raise AttributeError(name)
        return getattr(self._gpuyard_loader, name)

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        module: ModuleType | None = self._gpuyard_loader.create_module(spec)
        return module

    def exec_module(self, module: ModuleType) -> None:
        loader = self._gpuyard_loader
        loader.exec_module(module)
        try:
            if getattr(module, "__loader__", None) is self:
                module.__loader__ = loader
            spec = getattr(module, "__spec__", None)
            if spec is not None and spec.loader is self:
                spec.loader = loader
        except Exception:
            pass
        self._gpuyard_after(module)


class _TorchCudaFinder:
    """First on `sys.meta_path`: lets the other finders find `torch.cuda`, wraps its loader."""

    _gpuyard_gpu_mem_hook = True

    def __init__(self, cap_mib: int) -> None:
        self.cap_mib = cap_mib
        self._searching = False

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None = None,
        target: ModuleType | None = None,
    ) -> ModuleSpec | None:
        if fullname != _TARGET or self._searching:
            return None
        self._searching = True
        try:
            spec: ModuleSpec | None = None
            for finder in list(sys.meta_path):
                find = None if finder is self else getattr(finder, "find_spec", None)
                if find is not None:
                    spec = find(fullname, path, target)
                    if spec is not None:
                        break
            if spec is None or not hasattr(spec.loader, "exec_module"):
                return None  # the import system carries on (and fails) without us
            spec.loader = _LoaderProxy(spec.loader, self._after)  # type: ignore[assignment]
            return spec
        except Exception as exc:
            _not_applied(exc)
            return None
        finally:
            self._searching = False

    def _after(self, cuda: ModuleType) -> None:
        _register(cuda, self.cap_mib)


def _install(cap_mib: int) -> None:
    if any(getattr(f, "_gpuyard_gpu_mem_hook", False) for f in sys.meta_path):
        return  # another gpuyard hook (an outer copy) already did it
    sys.meta_path.insert(0, _TorchCudaFinder(cap_mib))
    cuda = sys.modules.get(_TARGET)
    if cuda is not None:  # torch.cuda already imported (not at startup, but be safe)
        _register(cuda, cap_mib)


def _chain() -> None:
    """Run the next `sitecustomize` on sys.path, as site.py would have without us."""
    exclude = set(_HOOK_DIRS)
    paths = [p for p in sys.path if isinstance(p, str) and _real(p) not in exclude]
    from importlib.machinery import PathFinder

    spec = PathFinder.find_spec("sitecustomize", paths)
    if spec is None or spec.loader is None:
        return
    from importlib.util import module_from_spec

    module = module_from_spec(spec)
    sys.modules[_NEXT_NAME] = module
    try:
        spec.loader.exec_module(module)
    except Exception as err:  # what site.execsitecustomize() does
        sys.modules.pop(_NEXT_NAME, None)
        if sys.flags.verbose:
            sys.excepthook(*sys.exc_info())
        elif sys.stderr is not None:
            sys.stderr.write(
                "Error in sitecustomize; set PYTHONVERBOSE for traceback:\n"
                f"{type(err).__name__}: {err}\n"
            )
        return
    # `import sitecustomize` finds this module: give it the next one's public names too.
    here = globals()
    for key, value in vars(module).items():
        if not key.startswith("_") and key not in here:
            here[key] = value


def _line_buffered() -> None:
    """stdout and stderr flushed at each line end (`\n`, and `\r` for progress bars)."""
    if os.environ.get(_ENV_LINES) != "1":
        return
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        # Unbuffered (`python -u`, PYTHONUNBUFFERED): writes go straight through, as asked.
        if reconfigure is None or getattr(stream, "write_through", True):
            continue
        if not getattr(stream, "line_buffering", True):
            reconfigure(line_buffering=True)


def _main() -> None:
    try:
        _line_buffered()
    except Exception as exc:
        _say(f"output not line-buffered: {type(exc).__name__}: {exc}")
    try:
        cap_mib = _cap_mib()
        if cap_mib is not None:
            _install(cap_mib)
    except Exception as exc:
        _not_applied(exc)
    try:
        _chain()
    except Exception as exc:
        _say(f"the next sitecustomize on sys.path was not run: {type(exc).__name__}: {exc}")


_main()
