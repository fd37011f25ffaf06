"""Which job events a webhook is told of, and how sbatch's `--mail-type` maps onto them.

gpuyard sends no mail (a training server rarely has a mail relay it may use); `--mail-type`
chooses the same events `--notify URL` webhooks get, so a script's directives keep meaning
what they meant.

    events_from_mail_type("BEGIN,END") -> ("begin", "end")
"""

from __future__ import annotations

from gpuyard.domain.errors import InvalidRequest
from gpuyard.domain.job import NOTIFY_EVENTS

# The events a job tells its webhooks when it names none: how it ended, if badly or not.
DEFAULT_EVENTS = ("end", "fail")

# sbatch's --mail-type values -> gpuyard's events. TIME_LIMIT_50/80/90 (a share of the limit
# used) become the one warning gpuyard has, `time_limit`; INVALID_DEPEND is the cancel a
# never-satisfied dependency makes; ARRAY_TASKS (a mail per task, not per array) is what
# webhooks do anyway; STAGE_OUT (burst buffers) has no counterpart.
_MAIL_TYPES: dict[str, tuple[str, ...]] = {
    "NONE": (),
    "BEGIN": ("begin",),
    "END": ("end",),
    "FAIL": ("fail",),
    "REQUEUE": ("requeue",),
    "ALL": ("begin", "end", "fail", "requeue", "cancel"),
    "INVALID_DEPEND": ("cancel",),
    "TIME_LIMIT": ("time_limit",),
    "TIME_LIMIT_50": ("time_limit",),
    "TIME_LIMIT_80": ("time_limit",),
    "TIME_LIMIT_90": ("time_limit",),
    "ARRAY_TASKS": (),
    "STAGE_OUT": (),
}


def events_from_mail_type(text: str) -> tuple[str, ...]:
    """The events `--mail-type TEXT` (comma-separated, any case) names, in NOTIFY_EVENTS'
    order; raises InvalidRequest naming the value it does not know."""
    chosen: set[str] = set()
    for word in (w.strip().upper() for w in text.split(",")):
        if word not in _MAIL_TYPES:
            raise InvalidRequest(
                f"--mail-type {word or text!r}: use {', '.join(_MAIL_TYPES)}",
                field="notify_events",
            )
        chosen.update(_MAIL_TYPES[word])
    return tuple(e for e in NOTIFY_EVENTS if e in chosen)
