"""API v1 wire models of sweeps (`gpuyard sweep`): the sweep file's table in, the sweep and
its ranked trials out. Times are ISO 8601 in UTC as elsewhere in the API."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

ParamValue = str | int | float | bool


class SweepIn(BaseModel):
    """A sweep to run: its file's table (TOML read into JSON: command, method, parameters,
    resources, metric, early_stop...; docs/cli.md "Sweeps") and where its trials run."""

    model_config = ConfigDict(extra="forbid")

    sweep: dict[str, Any] = Field(description="the sweep file's table, as JSON")
    workdir: str | None = Field(
        None, max_length=4095, description="the trials' working directory (the client's cwd)"
    )


class SweepTrialOut(BaseModel):
    """One trial: its job (the array's task `index`), parameters and the metric it reported."""

    index: int
    job_id: int | None = Field(None, description="null: the job was cleaned")
    task: str = Field(description="the job reference `ARRAY_INDEX`, e.g. 12_3")
    params: dict[str, ParamValue]
    best: float | None = Field(None, description="the metric's best value so far")
    last: float | None = Field(None, description="the metric's latest value")
    step: int | None = Field(None, description="the latest step the trial reported")
    state: str | None = None
    reason: str | None = Field(None, description="why it ended so, e.g. EarlyStopped: ...")


class SweepOut(BaseModel):
    """A sweep: its id is its job array's (`gpuyard cancel ID` cancels every trial)."""

    id: int
    name: str
    owner: str
    submitted_at: str | None
    method: str
    trial_count: int
    max_running: int = Field(description="the most trials running at once; 0: no cap")
    metric: str | None = None
    goal: str | None = None
    early_stop: str | None = Field(None, description='e.g. "median (min_steps 100, ...)"')
    states: dict[str, int] = Field(default_factory=dict, description="trials per state")
    trials: list[SweepTrialOut] = Field(
        default_factory=list, description="ranked by the metric (best first); empty in lists"
    )
