"""Quotas and fair-share weights (admins), `share` and `usage` (everyone: their own rows;
admins: all). `services/access/quotas.py` decides; these routes only translate."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Query, Response

from gpuyard.api.deps import Actor, Server
from gpuyard.domain.errors import Unavailable
from gpuyard.domain.limits import AccountLimits
from gpuyard.domain.usage import UsageRow
from gpuyard.schemas.limits_v1 import LimitsIn, LimitsOut, ShareOut, UsageOut
from gpuyard.services.access.quotas import LimitService

router = APIRouter(prefix="/api/v1", tags=["limits"])


async def _limits(server: Server) -> LimitService:
    if server.limits is None:
        raise Unavailable("this server keeps no limits")
    return server.limits


Limits = Annotated[LimitService, Depends(_limits)]
Kind = Literal["user", "team"]


def _out(entry: AccountLimits) -> LimitsOut:
    return LimitsOut(**asdict(entry))


@router.get("/admin/limits")
def list_limits(limits: Limits, actor: Actor) -> list[LimitsOut]:
    """Every user's and team's limits (admins); a user gets their own and their team's."""
    return [_out(e) for e in limits.limits(actor)]


@router.put("/admin/limits/{kind}/{name}")
def set_limits(kind: Kind, name: str, body: LimitsIn, limits: Limits, actor: Actor) -> LimitsOut:
    """Set some limits of a user or team (the others stay); the scheduler applies them at its
    next pass: jobs over a running limit wait with its reason, none is stopped."""
    return _out(limits.set_limits(actor, kind, name, **body.model_dump()))


@router.delete("/admin/limits/{kind}/{name}", status_code=204)
def clear_limits(kind: Kind, name: str, limits: Limits, actor: Actor) -> Response:
    limits.clear(actor, kind, name)
    return Response(status_code=204)


@router.get("/share")
def share(limits: Limits, actor: Actor) -> list[ShareOut]:
    """Shares, decayed usage and fair-share factor per user (as `sshare`)."""
    return [ShareOut(**asdict(r)) for r in limits.share(actor)]


@router.get("/usage")
def usage(
    limits: Limits,
    actor: Actor,
    by: Kind = "user",
    since: Annotated[float | None, Query(description="Unix time; default 7 days ago")] = None,
) -> list[UsageOut]:
    """GPU-hours allocated and used, jobs by state, mean utilisation (as `sreport`)."""
    return [_usage_out(r) for r in limits.usage(actor, by=by, since=since)]


def _usage_out(r: UsageRow) -> UsageOut:
    return UsageOut(
        key=r.key, jobs=r.jobs, states=r.states, allocated_gpu_h=r.allocated_gpu_h,
        used_gpu_h=r.used_gpu_h, util_mean_pct=r.util_mean_pct,
        energy_kwh=None if r.energy_kwh is None else round(r.energy_kwh, 6),
    )  # fmt: skip
