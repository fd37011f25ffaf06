"""`gpuyard`'s entry point: the hot commands by a fast start path, everything else by typer.

`submit`, `queue`, `show` and `cancel` are typed all day; importing typer + click alone costs
more than the whole command should (the goal: <= 60 ms wall). `cli/fast.py` parses exactly the
command lines it is sure of and runs them with the standard library; anything else (`--help`,
other commands, a usage error, an option it does not know) goes to the typer app, which
answers as it always did. Both paths run the same command bodies (`cli/commands.py`).
"""

import sys

from gpuyard.domain.errors import GpuyardError


def main() -> None:
    """Entry point: one clear line on error, never a traceback."""
    try:
        from gpuyard.cli.fast import run_fast

        code = run_fast(sys.argv[1:])
        if code is None:
            from gpuyard.cli.app_shell import one_command_app

            one = one_command_app(sys.argv[1:])
            if one is None:
                from gpuyard.cli.app import app

                app()
            else:
                one()
        else:
            _exit_now(code)
    except GpuyardError as exc:
        sys.stderr.write(f"gpuyard: {exc.message}\n")
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)
    except BrokenPipeError:
        _quiet_stdout()
        sys.exit(1)
    except OSError as exc:
        sys.stderr.write(f"gpuyard: {exc.strerror or exc}\n")
        sys.exit(1)


def _exit_now(code: int) -> None:
    """End a fast-path command without the interpreter's teardown: freeing every module and
    object it loaded took ~4 ms of a ~35 ms command, for nothing (the process is gone next).
    Its output is flushed first; the fast path's bodies leave no thread, file or exit hook
    behind that the teardown would have finished."""
    import os

    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _quiet_stdout() -> None:
    """The reader went away (`gpuyard queue | head`): no second error when Python exits."""
    import os

    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def __getattr__(name: str) -> object:
    """`gpuyard.cli.main.app`, as before, without importing typer for the fast path."""
    if name == "app":
        from gpuyard.cli.app import app

        return app
    raise AttributeError(name)
