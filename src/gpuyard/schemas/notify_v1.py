"""API v1 wire models of webhooks: settings, the secret, the delivery log (strict: unknown
fields are refused). A secret is sent once, when it is made; URLs of the delivery log are
their host only (a chat's incoming-hook URL carries its token)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictStr


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class NotifySettingsIn(_Strict):
    """The webhooks a user (or, for an admin with `?team=`, a team) sets once."""

    urls: Annotated[list[Annotated[StrictStr, Field(max_length=2048)]], Field(max_length=8)]
    events: Annotated[list[Annotated[StrictStr, Field(max_length=32)]], Field(max_length=16)] = (
        Field(default_factory=list, description="begin, end, fail, requeue, time_limit, cancel")
    )


class NotifySettingsOut(BaseModel):
    kind: Literal["user", "team"]
    name: str
    urls: list[str] = Field(description="a team's URLs are their host only for its members")
    events: list[str] = Field(description="empty: end and fail")
    secret_set: bool
    secret_at: float | None
    updated_at: float
    secret: str | None = Field(None, description="only when this request made it: shown once")


class NotifySecretOut(BaseModel):
    kind: Literal["user", "team"]
    name: str
    secret: str = Field(description="shown once: deliveries are signed with it from now on")
    secret_at: float


class NotifyTestIn(_Strict):
    url: Annotated[StrictStr, Field(max_length=2048)] | None = Field(
        None, description="where to send a ping; none: each of your own webhook URLs"
    )


class DeliveryOut(BaseModel):
    """One event for one URL, as the delivery log shows it."""

    id: str
    event: str
    job_id: int | None
    host: str
    state: Literal["pending", "delivered", "failed"]
    attempts: int
    last_status: int | None
    last_error: str
    created_at: float
    updated_at: float
    next_at: float | None = Field(None, description="the next try, while pending")
