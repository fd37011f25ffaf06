"""API v1 wire models of a job's progress, its metric series and GPU telemetry history.

Times in series and samples are epoch seconds (floats: compact, what chart libraries take);
`updated_at` is ISO 8601 in UTC as elsewhere in the API.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field, WithJsonSchema

ProgressSource = Literal["sdk", "protocol", "tqdm", "lightning", "hf"]


class ProgressOut(BaseModel):
    """A job's latest progress: what `gpuyard.progress()`, the `::gpuyard progress` line or a
    recognised progress bar last reported."""

    job_id: int
    step: int | None = None
    total: int | None = None
    fraction: float | None = Field(None, description="step / total in [0, 1], or null")
    rate_per_s: float | None = Field(None, description="steps per second over recent steps")
    eta_s: float | None = Field(None, description="seconds left at the recent rate, or null")
    metrics: dict[str, float] = Field(
        default_factory=dict, description="each metric's latest value"
    )
    updated_at: str | None = Field(None, description="when the job last reported, ISO 8601")
    source: ProgressSource | None = Field(None, description="where the last report came from")


# Fixed-length rows, validated as tuples, described to OpenAPI as arrays of 2 (5) numbers: a
# tuple's JSON schema (`prefixItems`) is refused by OpenAPI 3.0 tools (the fuzz test's).
Pair = Annotated[
    tuple[float, float],
    WithJsonSchema({"type": "array", "items": {"type": "number"}, "minItems": 2, "maxItems": 2}),
]
GpuSample = Annotated[
    tuple[float, float | None, float | None, float | None, float | None],
    WithJsonSchema({
        "type": "array", "items": {"anyOf": [{"type": "number"}, {"type": "null"}]},
        "minItems": 5, "maxItems": 5,
    }),
]  # fmt: skip


class SeriesOut(BaseModel):
    """A job's metric series: name -> [[t, value], ...] (t: epoch seconds), "step" included;
    downsampled to at most `max_points` points per series."""

    job_id: int
    series: dict[str, list[Pair]]


class GpuHistoryOut(BaseModel):
    """One GPU's telemetry history, oldest first."""

    index: int
    uuid: str
    resolution_s: float = Field(description="seconds each sample covers")
    samples: list[GpuSample] = Field(
        description="[t, util_pct, mem_used_mib, temp_c, power_w] (t: epoch seconds)"
    )


class JobGpuHistoryOut(BaseModel):
    """The GPU history of a job's runs on its GPUs (past jobs included)."""

    job_id: int
    gpus: list[GpuHistoryOut]
