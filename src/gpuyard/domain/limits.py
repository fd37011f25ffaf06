"""What an admin sets for one user or one team: quotas (`scheduling/quotas.py` enforces them)
and a fair-share weight (`shares`). Kept in the store's `limits` table; None: not set (no limit,
or the default share of 1)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

LimitKind = Literal["user", "team"]
DEFAULT_WINDOW_S = 7 * 86400.0


@dataclass(frozen=True, slots=True)
class AccountLimits:
    kind: LimitKind
    name: str
    max_gpus: int | None = None
    max_pending: int | None = None
    max_gpu_hours: float | None = None
    window_s: float = DEFAULT_WINDOW_S  # the rolling window of `max_gpu_hours`
    shares: float | None = None  # fair-share weight (None: 1)
    updated_at: float = 0.0

    @property
    def empty(self) -> bool:
        return (
            self.max_gpus is None and self.max_pending is None and self.max_gpu_hours is None
            and self.shares is None
        )  # fmt: skip
