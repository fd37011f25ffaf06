"""Which failures `--retries N` retries (`--retry-on`), in classes a user can name.

    failed     the command exited non-zero or was killed by a signal (default)
    timeout    it reached its time limit
    oom        it ran out of memory (host --mem or its --gpu-mem): retrying rarely helps,
               so only when asked
    launch     the command could not be started (not found, not executable): a typo does
               not fix itself, so only when asked

A job whose GPU or machine failed (NODE_FAIL) is requeued without `--retries`, up to the
server's limit, as Slurm requeues on a node failure.
"""

from __future__ import annotations

from gpuyard.domain.errors import InvalidRequest

RETRY_CLASSES = ("failed", "timeout", "oom", "launch")
DEFAULT_RETRY_ON = ("failed",)
MAX_RETRIES = 100


def check_retry_on(classes: tuple[str, ...], retries: int) -> tuple[str, ...]:
    """`classes` sorted and without repeats; raises InvalidRequest (one line) for an unknown
    class, or for classes given without any retries to spend on them."""
    unknown = sorted(set(classes) - set(RETRY_CLASSES))
    if unknown:
        raise InvalidRequest(
            f"retry_on: unknown class {unknown[0]!r}; give some of {', '.join(RETRY_CLASSES)}",
            field="retry_on",
        )
    if classes and retries == 0:
        raise InvalidRequest(
            "retry_on needs retries: give --retries N (how many times to try again)",
            field="retry_on",
        )
    return tuple(sorted(set(classes), key=RETRY_CLASSES.index))
