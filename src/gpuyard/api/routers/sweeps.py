"""/api/v1/sweeps: submit a sweep (its trials one job array), show one with its trials ranked
by the metric, list one's own (`services/workflows/sweeps.py`). Another user's sweep is not found,
as
their jobs are; admins see all."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, Query

from gpuyard.api.deps import Actor, Server
from gpuyard.domain.errors import NotFound, Unavailable
from gpuyard.domain.job import REASON_NONE, display_state
from gpuyard.domain.sweep import SweepRecord
from gpuyard.schemas.sweeps_v1 import SweepIn, SweepOut, SweepTrialOut
from gpuyard.services.server import ServerFacade
from gpuyard.services.workflows.sweeps import SweepService

router = APIRouter(prefix="/api/v1/sweeps", tags=["sweeps"])

MAX_SWEEP_ID = 2**63 - 1


def _sweeps(server: ServerFacade) -> SweepService:
    if server.sweeps is None:
        raise Unavailable("this server runs no sweeps")
    return server.sweeps


@router.post("", status_code=201)
def submit_sweep(body: SweepIn, server: Server, actor: Actor) -> SweepOut:
    """Queue every trial of the sweep as one job array (at most `max_running` at once); the
    answer: the sweep, its id (the array's) and its trials in order."""
    sweeps = _sweeps(server)
    home = server.submits.owner_home(actor) or str(Path.home())
    record, _ = sweeps.submit(body.sweep, actor, body.workdir or home)
    return _out(sweeps, record, with_trials=True)


@router.get("")
def list_sweeps(
    server: Server,
    actor: Actor,
    all: Annotated[bool, Query(description="every user's (admins)")] = False,
) -> list[SweepOut]:
    """Your sweeps (an admin's with `all`: everyone's), oldest first, without their trials."""
    sweeps = _sweeps(server)
    return [_out(sweeps, r, with_trials=False) for r in sweeps.list_sweeps(actor, everyone=all)]


@router.get("/{sweep_id}")
def show_sweep(sweep_id: int, server: Server, actor: Actor) -> SweepOut:
    """The sweep with its trials ranked by the metric (best first; trials that reported
    nothing last): parameters, best and latest value, step, state, why it ended."""
    sweeps = _sweeps(server)
    if not 0 < sweep_id <= MAX_SWEEP_ID:
        raise NotFound(f"sweep {sweep_id} not found: `gpuyard sweep list` lists yours")
    return _out(sweeps, sweeps.get(sweep_id, actor), with_trials=True)


def _out(sweeps: SweepService, record: SweepRecord, *, with_trials: bool) -> SweepOut:
    sweep = record.sweep
    rule = sweep.early_stop
    trials = []
    if with_trials:
        for view in sweeps.trials(record):
            job = view.job
            ended = job is not None and job.state.is_terminal and job.reason != REASON_NONE
            trials.append(
                SweepTrialOut(
                    index=view.index,
                    job_id=job.id if job else None,
                    task=f"{record.id}_{view.index}",
                    params=dict(view.params),
                    best=view.best,
                    last=view.last,
                    step=view.step,
                    state=display_state(job) if job is not None else None,
                    reason=job.reason if job is not None and ended else None,
                )
            )
    return SweepOut(
        id=record.id, name=record.name, owner=record.owner,
        submitted_at=_iso(record.submitted_at), method=sweep.method,
        trial_count=len(record.trials), max_running=sweep.max_running,
        metric=sweep.metric.name if sweep.metric else None,
        goal=sweep.metric.goal if sweep.metric else None,
        early_stop=(
            f"{rule.rule} (min_steps {rule.min_steps}, min_trials {rule.min_trials})"
            if rule else None
        ),
        states=sweeps.summary(record), trials=trials,
    )  # fmt: skip


def _iso(ts: float | None) -> str | None:
    try:
        return None if ts is None else datetime.fromtimestamp(ts, UTC).isoformat()
    except (ValueError, OverflowError, OSError):
        return None
