"""When the client sends a request again: the one retry policy of the CLI and the SDK.

A server restart takes seconds (6-12 s measured) and a busy or stalled server answers 503 or
429 with Retry-After ("send the same request again"); without retries every command typed
then failed at once, and a 112-job cancel did nothing. What is retried, and why it is safe:

- a connection error (refused, reset, no socket while the server restarts, the answer lost):
  again when sending the request twice does what sending it once does (`may_resend`: every
  read, cancel, hold, release, requeue, update, PUT and DELETE, a submit with an
  Idempotency-Key); a call that creates something (an unkeyed POST) only when the request
  certainly never left (nobody listening), never after it may have reached the server;
- a 503 or 429 that carries Retry-After, when the call may be sent twice: the server says when
  to come back (its wait honoured, at most `MAX_RETRY_AFTER_S` at a time). Not for a create
  without a key: a stalled database's 503 leaves its write to land later (`DatabaseStalled`),
  so a second sending could make a second one. A 503 or 429 without Retry-After (this server
  keeps no limits; a quota) and every other 4xx is an answer, never retried.

For at most `window_s()` seconds after the first failure (`GPUYARD_CLIENT_RETRY_S`, or the older
`GPUYARD_SUBMIT_RETRY_S`; 30 s; 0: no retry), pausing 0.1, 0.2, 0.4 ... at most 2 s, each
pause shortened at random by up to a half so that clients that lost one server do not all
come back at once. Standard library only, no `typing`: it is on the CLI's start path.
"""

from __future__ import annotations

import os
import time

from gpuyard.domain.errors import GpuyardError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import TypeVar

    T = TypeVar("T")

WINDOW_S = 30.0
WINDOW_ENV = "GPUYARD_CLIENT_RETRY_S"
OLD_WINDOW_ENV = "GPUYARD_SUBMIT_RETRY_S"  # its name before every call was retried
FIRST_PAUSE_S = 0.1
MAX_PAUSE_S = 2.0
# A Retry-After longer than this is waited in pieces of this (and asked again after each).
MAX_RETRY_AFTER_S = 10.0
# POSTs whose second sending changes nothing more than the first: the verbs on a job, an
# array, a GPU or an account that set a state (cancel, hold ...), and the two that only ask.
_IDEMPOTENT_POST_ENDS = (
    "/cancel", "/hold", "/release", "/requeue", "/drain", "/resume", "/disable", "/enable",
    "/dry-run", "/jobs/clean",
)  # fmt: skip


def window_s() -> float:
    """How long a failing call is retried: GPUYARD_CLIENT_RETRY_S, else GPUYARD_SUBMIT_RETRY_S, else
    30 s (one not a number: the default)."""
    for name in (WINDOW_ENV, OLD_WINDOW_ENV):
        text = os.environ.get(name)
        if text:
            try:
                return max(0.0, float(text))
            except ValueError:
                return WINDOW_S
    return WINDOW_S


def may_resend(method: str, path: str, headers: dict[str, str]) -> bool:
    """Whether the request may be sent again after it may have reached the server."""
    if method in ("GET", "HEAD", "PUT", "PATCH", "DELETE"):
        return True
    if "Idempotency-Key" in headers:
        return True
    return path.split("?", 1)[0].endswith(_IDEMPOTENT_POST_ENDS)


def retry_after_s(error: GpuyardError) -> float | None:
    """The server's "send it again in N s" (a 503 or 429 with Retry-After), else None."""
    return error.retry_after_s


def is_unreachable(error: GpuyardError) -> bool:
    return error.code == "unreachable"


def with_retries(
    attempt: Callable[[], T],
    *,
    resend: bool,
    window: float,
    on_wait: Callable[[GpuyardError, float], object],
    gave_up: Callable[[GpuyardError, bool], GpuyardError],
) -> T:
    """`attempt()`'s result, trying again on what is safe to retry (the module's rules):
    `resend` says the request may be sent twice; `on_wait(error, window)` is called before
    each pause; `gave_up(last error, maybe sent)` is what is raised once `window` is spent."""
    give_up_at: float | None = None
    pause_s = FIRST_PAUSE_S
    maybe_sent = False
    while True:
        try:
            return attempt()
        except GpuyardError as exc:
            server_wait = retry_after_s(exc)
            if is_unreachable(exc):
                sent = bool(getattr(exc, "maybe_sent", True))
                if sent and not resend:
                    raise
                maybe_sent = maybe_sent or sent
            elif server_wait is None or not resend:
                raise
            now = time.monotonic()
            if give_up_at is None:
                give_up_at = now + window
            if server_wait is not None:
                wait_s = min(max(server_wait, FIRST_PAUSE_S), MAX_RETRY_AFTER_S)
            else:
                wait_s = pause_s * (0.5 + os.urandom(1)[0] / 510)
                pause_s = min(pause_s * 2, MAX_PAUSE_S)
            if now + wait_s > give_up_at:
                if window <= 0:
                    raise
                raise gave_up(exc, maybe_sent) from None
            on_wait(exc, window)
            time.sleep(wait_s)
