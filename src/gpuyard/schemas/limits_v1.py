"""API v1 wire models of limits, fair share and usage (strict: unknown fields are refused)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class LimitsIn(_Strict):
    """Limits to set (fields left out stay as they were)."""

    max_gpus: Annotated[StrictInt, Field(ge=0, le=1_000_000)] | None = None
    max_pending: Annotated[StrictInt, Field(ge=0, le=10_000_000)] | None = None
    max_gpu_hours: Annotated[StrictFloat | StrictInt, Field(gt=0, le=1e12)] | None = None
    window_s: Annotated[StrictFloat | StrictInt, Field(gt=0, le=1e10)] | None = Field(
        None, description="the rolling window of max_gpu_hours, seconds (default 7 days)"
    )
    shares: Annotated[StrictFloat | StrictInt, Field(gt=0, le=1e9)] | None = Field(
        None, description="fair-share weight (default 1)"
    )


class LimitsOut(BaseModel):
    kind: Literal["user", "team"]
    name: str
    max_gpus: int | None
    max_pending: int | None
    max_gpu_hours: float | None
    window_s: float
    shares: float | None
    updated_at: float


class ShareOut(BaseModel):
    """One user's line of `gpuyard share` (as `sshare`)."""

    user: str
    team: str | None
    raw_shares: float
    norm_shares: float
    raw_usage_gpu_h: float = Field(description="GPU-hours decayed with the half-life")
    norm_usage: float
    factor: float = Field(description="2^(-norm_usage/norm_shares): 1 owed, 0.5 even, 0 over")


class UsageOut(BaseModel):
    """One user's or team's line of `gpuyard usage` (as `sreport`)."""

    key: str
    jobs: int
    states: dict[str, int]
    allocated_gpu_h: float
    used_gpu_h: float | None = Field(description="from telemetry; null: no job was sampled")
    util_mean_pct: float | None
    energy_kwh: float | None = Field(
        None, description="its jobs' GPU energy (gpu_stats.energy_j); null: none was measured"
    )
