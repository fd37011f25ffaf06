"""The signal a job is stopped with (`submit --signal`, `cancel --signal`), in Slurm's words.

A job's processes get this signal once when it is cancelled, preempted or reaches its time
limit, then SIGKILL after the grace period. Jobs that checkpoint on SIGUSR1 (a common
convention, e.g. PyTorch Lightning's SLURMEnvironment) choose it instead of SIGTERM.

    parse_signal("USR1") == parse_signal("SIGUSR1") == parse_signal("10") == 10

Slurm's `--signal=[{R|B}:]SIG[@TIME]` also sends a signal TIME seconds before the limit: the
CLI's `--signal SIG@SECONDS` is that warning (`parse_warning`; the job's `warn_signal` and
`warn_before_s`), while a plain `--signal SIG` stays the stop signal. The B:/R: prefixes are
refused in one line rather than silently dropped.

    parse_warning("USR1@120") == (10, 120)
"""

from __future__ import annotations

import signal

from gpuyard.domain.errors import InvalidRequest

SIGTERM = int(signal.SIGTERM)
# Signals that cannot stop anything: the process is paused, resumed or ignores it by default.
_USELESS = {signal.SIGSTOP, signal.SIGCONT, signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU,
            signal.SIGCHLD, signal.SIGWINCH, signal.SIGURG}  # fmt: skip


def parse_signal(text: str | int, *, field: str = "stop_signal") -> int:
    """A signal's number from its name (`USR1`, `SIGUSR1`, any case) or number; raises
    InvalidRequest (one line) for anything that is not a signal that can stop a job."""
    raw = str(text).strip()
    if "@" in raw or ":" in raw:
        raise InvalidRequest(
            f"{field} {raw!r}: only the signal is taken here (no B:/R: prefix or @time); a "
            "signal before the time limit is warn_signal with warn_before_s (the CLI's "
            "--signal USR1@120)",
            field=field,
        )
    if raw.lstrip("-").isdigit():
        number = int(raw)
    else:
        name = raw.upper()
        found = getattr(signal.Signals, name if name.startswith("SIG") else f"SIG{name}", None)
        if found is None:
            raise InvalidRequest(
                f"{field} {raw!r} is not a signal: give a name (TERM, INT, USR1, USR2, HUP) "
                "or a number",
                field=field,
            )
        number = int(found)
    if not 1 <= number <= int(signal.SIGRTMAX) or number in _USELESS:
        raise InvalidRequest(
            f"{field} {raw}: not a signal that stops a job (use e.g. TERM, INT, USR1)",
            field=field,
        )
    return number


def parse_warning(text: str, *, field: str = "signal") -> tuple[int, int]:
    """`SIG@SECONDS` (Slurm's `--signal USR1@120`) -> (signal number, seconds before the time
    limit); raises InvalidRequest (one line) for a bad signal or time."""
    raw = text.strip()
    name, _, seconds = raw.partition("@")
    if not seconds.strip().isdigit() or int(seconds) < 1:
        raise InvalidRequest(
            f"{field} {raw!r}: after @ give whole seconds before the time limit, e.g. "
            "--signal USR1@120",
            field=field,
        )
    return parse_signal(name, field=field), int(seconds)


def signal_name(number: int) -> str:
    """`SIGUSR1` for 10; the number as text for one without a name (real-time signals)."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return str(number)
