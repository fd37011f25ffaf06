"""Webhooks (`gpuyard notify`): one's settings, the signing secret, the delivery log and a
test ping. `services/workflows/notify.py` decides (and redacts, by `services/access/rules.py`);
these routes only translate."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request, Response

from gpuyard.api.deps import Actor
from gpuyard.domain.errors import Unavailable
from gpuyard.domain.webhooks import Delivery, NotifySettings
from gpuyard.schemas.notify_v1 import (
    DeliveryOut,
    NotifySecretOut,
    NotifySettingsIn,
    NotifySettingsOut,
    NotifyTestIn,
)
from gpuyard.services.server import ServerFacade
from gpuyard.services.workflows.notify import NotifyService

router = APIRouter(prefix="/api/v1/notify", tags=["notify"])


async def _notify(request: Request) -> NotifyService:
    server: ServerFacade = request.app.state.server
    if server.notify is None:
        raise Unavailable("this server sends no webhooks")
    return server.notify


Notify = Annotated[NotifyService, Depends(_notify)]
Team = Annotated[
    str | None,
    Query(max_length=255, description="a team's defaults (admins) instead of your own"),
]


def _settings_out(e: NotifySettings, secret: str | None = None) -> NotifySettingsOut:
    return NotifySettingsOut(
        kind=e.kind, name=e.name, urls=list(e.urls), events=list(e.events),
        secret_set=e.secret is not None, secret_at=e.secret_at, updated_at=e.updated_at,
        secret=secret,
    )  # fmt: skip


def _delivery_out(d: Delivery) -> DeliveryOut:
    return DeliveryOut(
        id=d.id, event=d.event, job_id=d.job_id, host=d.host, state=d.state,
        attempts=d.attempts, last_status=d.last_status, last_error=d.last_error,
        created_at=d.created_at, updated_at=d.updated_at,
        next_at=d.next_at if d.state == "pending" else None,
    )  # fmt: skip


@router.get("")
def get_settings(notify: Notify, actor: Actor) -> list[NotifySettingsOut]:
    """Your webhook defaults and your team's (admins: every user's and team's)."""
    return [_settings_out(e) for e in notify.settings(actor)]


@router.put("")
def set_settings(
    body: NotifySettingsIn, notify: Notify, actor: Actor, team: Team = None
) -> NotifySettingsOut:
    """Set your webhook URLs and events (applied to your jobs that name no `--notify`); the
    first set makes your signing secret and answers it, once."""
    entry, secret = notify.set(actor, body.urls, body.events, team=team)
    return _settings_out(entry, secret)


@router.delete("", status_code=204)
def clear_settings(notify: Notify, actor: Actor, team: Team = None) -> Response:
    notify.clear(actor, team=team)
    return Response(status_code=204)


@router.post("/secret", status_code=201)
def rotate_secret(notify: Notify, actor: Actor, team: Team = None) -> NotifySecretOut:
    """A new signing secret, shown once; the old one signs nothing from now on."""
    entry = notify.rotate_secret(actor, team=team)
    assert entry.secret is not None and entry.secret_at is not None
    return NotifySecretOut(
        kind=entry.kind, name=entry.name, secret=entry.secret, secret_at=entry.secret_at
    )


@router.get("/deliveries")
def deliveries(
    notify: Notify,
    actor: Actor,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
) -> list[DeliveryOut]:
    """Your deliveries, newest first: event, job, the URL's host, state, tries, last error."""
    return [_delivery_out(d) for d in notify.deliveries(actor, limit)]


@router.post("/test", status_code=202)
def test(notify: Notify, actor: Actor, body: NotifyTestIn | None = None) -> list[DeliveryOut]:
    """Send a `ping` to a URL (or to each of your webhook URLs); see it in the delivery log."""
    return [_delivery_out(d) for d in notify.test(actor, body.url if body else None)]
