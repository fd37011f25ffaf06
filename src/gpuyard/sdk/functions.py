"""Python functions run as gpuyard jobs, as submitit runs them on Slurm.

    handle = client.submit_function(train, "cifar10", gpus=1, time_limit="2h")
    accuracy = handle.result()          # the return value, or train's exception raised here
    handles = client.map_array(evaluate, checkpoints, gpus=1)   # one array task per item
    scores = [h.result() for h in handles]

The function and its arguments are pickled into a folder of their own (`folder`, default
`~/.cache/gpuyard/functions`, which the job's machine must see: on one box it does; on a
cluster, a shared path), the job runs `python -m gpuyard.sdk.run_function FOLDER` with this
process's interpreter and `sys.path`, and writes the result beside them. The job runs as the
submitting account, so the interpreter and the folder are the user's own.

Pickling: cloudpickle where it is installed (what submitit uses: functions defined in a script's
`__main__`, lambdas and closures go by value), else the standard library's pickle, which sends
a function by reference (its module and name), so it must be importable in the job: a script's
own function or a lambda is refused at submit, in one line saying so. cloudpickle is not made a
dependency: it is pure Python, 70 ms to import, and only these calls need it (`pip install
cloudpickle`; submitit and Ray install it anyway).
"""

from __future__ import annotations

import os
import pickle
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Generic, Protocol, TypeVar

from gpuyard.domain.errors import InvalidRequest
from gpuyard.sdk.records import Job, JobFailed
from gpuyard.sdk.run_function import RemoteError, dumps, file_names

R = TypeVar("R")

# What the job takes from this process, as the CLI's submit exports them (cli/submitting.py),
# so the job finds the same Python, its packages and libraries.
EXPORTED_VARS = ("PATH", "VIRTUAL_ENV", "CONDA_PREFIX", "CONDA_DEFAULT_ENV", "LD_LIBRARY_PATH",
                 "HOME", "USER", "LANG")  # fmt: skip
RUNNER = "gpuyard.sdk.run_function"
# A result file appears by rename before the job's process exits; a folder another machine
# writes (NFS) may show it a little after the server saw the end: asked again this long.
_RESULT_GRACE_S = 5.0


class JobsClient(Protocol):
    """What a handle asks of the client (gpuyard.client.Client)."""

    def job(self, job_id: int) -> Job: ...

    def cancel(self, job_id: int, signal: str | int | None = None) -> Job: ...

    def log(self, job_id: int, offset: int = 0, *, tail: int | None = None) -> bytes: ...

    def wait(
        self, jobs: int, poll_s: float = ..., *, timeout: float | None = ...,
        raise_on_failure: bool = ...,
    ) -> Job: ...  # fmt: skip


class RemoteTraceback(Exception):
    """The traceback of an exception raised in a job: set as that exception's `__cause__`,
    so Python prints it under the local one (as concurrent.futures does for a process pool)."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text

    def __str__(self) -> str:
        return f'\n"""\n{self.text.rstrip()}\n"""'


class FunctionJob(Generic[R]):
    """A Python function running as a gpuyard job (submitit's Job): `result()` waits for it."""

    def __init__(self, client: JobsClient, job: Job, folder: str, index: int | None) -> None:
        self._client = client
        self.job_id = job.id
        self.folder = folder
        self.index = index  # its array task index; None: not an array
        self._last = job

    def __repr__(self) -> str:
        return f"FunctionJob(job_id={self.job_id}, state={self._last.state!r})"

    @property
    def id(self) -> int:
        return self.job_id

    def record(self) -> Job:
        """The job's record as the server has it now."""
        self._last = self._client.job(self.job_id)
        return self._last

    @property
    def state(self) -> str:
        return self.record().state

    def done(self) -> bool:
        """Ended, whatever its end (`result()` then answers without waiting)."""
        return self.record().ended

    def cancel(self) -> Job:
        return self._client.cancel(self.job_id)

    def log(self) -> str:
        """The job's output so far (the function's prints, a failure's traceback)."""
        return self._client.log(self.job_id).decode(errors="replace")

    def wait(self, timeout: float | None = None, poll_s: float = 0.5) -> Job:
        """The job's final record; WaitTimeout after `timeout` seconds (the job runs on)."""
        self._last = self._client.wait(self.job_id, poll_s, timeout=timeout, raise_on_failure=False)
        return self._last

    def result(self, timeout: float | None = None, poll_s: float = 0.5) -> R:
        """The function's return value once the job ends. Raises the function's own exception
        (the job's traceback as its `__cause__`), JobFailed when the job ended without a result
        (cancelled, out of its time limit or memory, its node lost), WaitTimeout after
        `timeout` seconds, FileNotFoundError when a COMPLETED job's result is not in `folder`
        (a folder the job's machine does not see)."""
        outcome = self._outcome(self.wait(timeout, poll_s))
        if outcome[0] == "ok":
            value: R = outcome[1]
            return value
        raise _remote(outcome[1], outcome[2])

    def exception(self, timeout: float | None = None, poll_s: float = 0.5) -> BaseException | None:
        """The function's exception (None: it returned), once the job ends."""
        try:
            self.result(timeout, poll_s)
        except JobFailed:
            raise
        except BaseException as exc:
            if isinstance(exc.__cause__, RemoteTraceback):
                return exc
            raise
        return None

    def _outcome(self, job: Job) -> tuple[Any, ...]:
        path = os.path.join(self.folder, file_names(self.index)[1])
        give_up_at = time.monotonic() + (_RESULT_GRACE_S if job.ok else 0.0)
        while True:
            try:
                with open(path, "rb") as f:
                    outcome: tuple[Any, ...] = pickle.load(f)
                return outcome
            except FileNotFoundError:
                if time.monotonic() >= give_up_at:
                    break
                time.sleep(0.1)
        if not job.ok:
            raise JobFailed(job)
        raise FileNotFoundError(
            f"job {job.id} COMPLETED but left no result at {path}: the job's machine must see "
            "that folder; pass submit_function(..., folder=) a path shared with it"
        )


def _remote(exc: BaseException | None, text: str) -> BaseException:
    if exc is None:
        exc = RemoteError("Exception", "the job's exception did not come back", text)
    exc.__cause__ = RemoteTraceback(text)
    return exc


def prepare(
    function: Callable[..., Any], calls: Sequence[tuple[tuple[Any, ...], dict[str, Any]]],
    folder: str | None, *, array: bool,
) -> tuple[str, list[str], dict[str, str]]:  # fmt: skip
    """Pickle `function` and each call's (args, kwargs) into a new folder under `folder`;
    the folder, the job's argv and the environment it needs."""
    if not callable(function):
        raise InvalidRequest(f"submit_function: {function!r} is not callable")
    function_bytes = _pickled(function, _what(function))
    base = os.path.abspath(os.path.expanduser(folder or default_folder()))
    os.makedirs(base, mode=0o700, exist_ok=True)
    prefix = "".join(c if c.isalnum() or c in "-_" else "_" for c in _name(function))[:40]
    here = tempfile.mkdtemp(prefix=f"{prefix}-", dir=base)
    with open(os.path.join(here, "function.pkl"), "wb") as f:
        f.write(function_bytes)
    for index, call in enumerate(calls):
        data = _pickled(call, f"the arguments of {_what(function)}" + (
            f" (item {index})" if array else ""))  # fmt: skip
        with open(os.path.join(here, file_names(index if array else None)[0]), "wb") as f:
            f.write(data)
    argv = [sys.executable, "-m", RUNNER, here, *(["--array"] if array else [])]
    return here, argv, job_env()


def default_folder() -> str:
    """`$XDG_CACHE_HOME/gpuyard/functions` (~/.cache/gpuyard/functions)."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "gpuyard", "functions")


def job_env() -> dict[str, str]:
    """This process's interpreter environment, and its `sys.path` as PYTHONPATH: the job
    imports what this process could (its script's folder, its project, gpuyard itself)."""
    env = {k: os.environ[k] for k in EXPORTED_VARS if k in os.environ}
    paths = [os.path.abspath(p or os.curdir) for p in sys.path]
    env["PYTHONPATH"] = os.pathsep.join(p for p in dict.fromkeys(paths) if os.path.exists(p))
    return env


def calls_of(iterables: Sequence[Iterable[Any]]) -> list[tuple[tuple[Any, ...], dict[str, Any]]]:
    """map_array's calls: the items of `iterables` zipped, as `map` does (the shortest wins)."""
    return [(tuple(items), {}) for items in zip(*iterables, strict=False)]


def job_name(function: Callable[..., Any]) -> str:
    return _name(function)


def _name(function: Callable[..., Any]) -> str:
    inner = getattr(function, "func", function)  # functools.partial
    return str(getattr(inner, "__name__", None) or type(inner).__name__)


def _what(function: Callable[..., Any]) -> str:
    inner = getattr(function, "func", function)
    return f"{getattr(inner, '__module__', '?')}.{getattr(inner, '__qualname__', _name(inner))}"


def _pickled(value: object, what: str) -> bytes:
    try:
        data = dumps(value)
    except Exception as exc:
        raise InvalidRequest(f"cannot send {what} to a job: {exc}{_hint()}") from None
    if not _has_cloudpickle():
        found = _by_reference_from_main(value)
        if found:
            raise InvalidRequest(
                f"cannot send {found} to a job: it is defined in this script (__main__), "
                "which the job cannot import; move it to a module, or `pip install cloudpickle`"
            )
    return data


def _by_reference_from_main(value: object) -> str | None:
    for item in _walk(value):
        if callable(item) and getattr(item, "__module__", None) == "__main__":
            return f"__main__.{getattr(item, '__qualname__', repr(item))}"
    return None


def _walk(value: object) -> Iterable[object]:
    yield value
    inner = getattr(value, "func", None)
    if inner is not None:
        yield inner
    if isinstance(value, tuple | list):
        for item in value:
            yield from _walk(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _walk(item)


def _has_cloudpickle() -> bool:
    try:
        import cloudpickle  # noqa: F401
    except ImportError:
        return False
    return True


def _hint() -> str:
    return "" if _has_cloudpickle() else " (`pip install cloudpickle` sends lambdas and closures)"
