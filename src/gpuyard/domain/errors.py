"""One exception tree with stable codes; the API maps codes to HTTP statuses in one table."""

from __future__ import annotations


class GpuyardError(Exception):
    """Base of every error a user may see; `code` is stable, `message` is for the person."""

    code = "error"
    # On the client: the seconds a 503 or 429 said to wait before sending it again
    # (Retry-After), which `gpuyard._retry` honours; None: an answer, not to be retried.
    retry_after_s: float | None = None

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


class InvalidRequest(GpuyardError):
    """The request is malformed or asks for something impossible (HTTP 422)."""

    code = "invalid_request"


class NotFound(GpuyardError):
    """The named object does not exist (HTTP 404)."""

    code = "not_found"


class Conflict(GpuyardError):
    """The request contradicts the object's current state (HTTP 409)."""

    code = "conflict"


class Unauthorized(GpuyardError):
    """Missing or wrong API token (HTTP 401)."""

    code = "unauthorized"


class Forbidden(GpuyardError):
    """The caller is known but may not do this (HTTP 403)."""

    code = "forbidden"


class PayloadTooLarge(GpuyardError):
    """The request body is larger than the server accepts (HTTP 413)."""

    code = "payload_too_large"


class QuotaExceeded(GpuyardError):
    """A limit an admin set refuses this request now (HTTP 429): too many jobs pending, or a
    job larger than a limit will ever allow."""

    code = "quota_exceeded"


class Unavailable(GpuyardError):
    """The server cannot serve the request right now (HTTP 503)."""

    code = "unavailable"


class DatabaseStalled(Unavailable):
    """The database did not answer within the request's deadline (HTTP 503 with Retry-After:
    `retry_after_s`); the call was left to finish in its own thread."""

    def __init__(self, message: str, *, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


# How long a client told WritesPaused waits before it sends again: a server takes its database
# back within a second or two of the database's return.
WRITES_PAUSED_RETRY_S = 2


class WritesPaused(Unavailable):
    """The server cannot write its database now (on PostgreSQL: its session, and the lock that
    makes it the one server, ended with a restart or a network cut) and is taking it back
    (HTTP 503 with Retry-After: `retry_after_s`); nothing of the request was saved."""

    def __init__(self, message: str, *, retry_after_s: int = WRITES_PAUSED_RETRY_S) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class StateDiskFull(GpuyardError):
    """The disk holding the server's state (its database, job folders) has no room left, so
    nothing of the request was saved (HTTP 507). The server keeps serving reads and takes
    writes again by itself once space is freed: nothing to restart."""

    code = "state_disk_full"


ERRORS_BY_CODE: dict[str, type[GpuyardError]] = {
    cls.code: cls
    for cls in (
        GpuyardError,
        InvalidRequest,
        NotFound,
        Conflict,
        Unauthorized,
        Forbidden,
        PayloadTooLarge,
        QuotaExceeded,
        Unavailable,
        StateDiskFull,
    )
}
