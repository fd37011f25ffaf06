"""What a function job runs: `python -m gpuyard.sdk.run_function FOLDER [--array]`.

It loads the function and its arguments the SDK pickled into FOLDER (`gpuyard.sdk.functions`),
calls it, and writes what came of it to `result.pkl` (an array task: `result.<index>.pkl`,
the index from SLURM_ARRAY_TASK_ID) by write-then-rename, so a result is whole or absent:
("ok", value), or ("error", exception, traceback text) with the exception also on stderr (the
job's log) and exit status 1, so the job ends FAILED as it would have locally. Standard library
only (and cloudpickle when installed), so a job starts in milliseconds more than its function.
"""

from __future__ import annotations

import os
import pickle
import sys
import traceback

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


class RemoteError(Exception):
    """The function's exception when it could not come back itself (not picklable): its type's
    name and its message, with the job's traceback text in `remote_traceback`."""

    def __init__(self, type_name: str, message: str, remote_traceback: str = "") -> None:
        super().__init__(f"{type_name}: {message}")
        self.type_name = type_name
        self.message = message
        self.remote_traceback = remote_traceback

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.type_name, self.message, self.remote_traceback))


def dumps(value: object) -> bytes:
    """cloudpickle where installed (functions of `__main__`, lambdas, closures by value), else
    pickle (importable functions, by reference). Either's bytes load with `pickle.loads`."""
    try:
        import cloudpickle
    except ImportError:
        return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    data: bytes = cloudpickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    return data


def file_names(index: int | None) -> tuple[str, str]:
    """(arguments, result) file names of a single call (None) or an array's task `index`."""
    if index is None:
        return "args.pkl", "result.pkl"
    return f"args.{index}.pkl", f"result.{index}.pkl"


def _outcome(folder: str, index: int | None) -> tuple[Any, ...]:
    args_name, _ = file_names(index)
    try:
        with open(os.path.join(folder, "function.pkl"), "rb") as f:
            function = pickle.load(f)
        with open(os.path.join(folder, args_name), "rb") as f:
            args, kwargs = pickle.load(f)
        return ("ok", function(*args, **kwargs))
    except BaseException as exc:  # the function's own end, SystemExit and Ctrl-C included
        text = traceback.format_exc()
        sys.stderr.write(text)
        try:
            pickle.loads(dumps(exc))
        except Exception:
            exc = RemoteError(type(exc).__qualname__, str(exc), text)
        return ("error", exc, text)


def _write(path: str, outcome: tuple[Any, ...]) -> None:
    try:
        data = dumps(outcome)
    except Exception as exc:  # a return value that does not pickle
        text = f"the function's return value cannot be pickled: {exc}\n"
        sys.stderr.write(text)
        data = dumps(("error", RemoteError(type(exc).__qualname__, str(exc), text), text))
    partial = f"{path}.{os.getpid()}.partial"
    with open(partial, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(partial, path)


def main(argv: list[str]) -> int:
    if len(argv) not in (1, 2) or argv[1:] not in ([], ["--array"]):
        sys.stderr.write("usage: python -m gpuyard.sdk.run_function FOLDER [--array]\n")
        return 2
    folder = argv[0]
    index = None
    if argv[1:] == ["--array"]:
        task = os.environ.get("SLURM_ARRAY_TASK_ID", "")
        if not task.isdigit():
            sys.stderr.write("gpuyard: an array task without SLURM_ARRAY_TASK_ID (was the job "
                             "submitted with --env GPUYARD_SLURM_ENV=0?)\n")  # fmt: skip
            return 2
        index = int(task)
    outcome = _outcome(folder, index)
    _write(os.path.join(folder, file_names(index)[1]), outcome)
    return 0 if outcome[0] == "ok" else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
