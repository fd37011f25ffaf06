"""API v1 wire models of accounts, teams and tokens (strict: unknown fields are refused).
A token's secret appears once, in `TokenCreatedOut`; no other model carries it."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictStr


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


_Name = Annotated[StrictStr, Field(min_length=1, max_length=64)]


class TokenCreateIn(_Strict):
    """A new token for the caller."""

    scope: Literal["read", "submit", "admin"] = Field(
        "submit", description="read: GETs; submit: also one's own jobs and tokens; admin: all"
    )
    expires: Annotated[StrictStr, Field(max_length=32)] = Field(
        "90d", description="lifetime (90d, 12h, [D-]HH:MM:SS) or `never`"
    )


class TokenOut(BaseModel):
    """A token's record (never its secret). Times are Unix seconds; null: never / not yet."""

    id: int
    user: str
    scope: str
    created_at: float
    expires_at: float | None
    last_used_at: float | None
    expired: bool


class TokenCreatedOut(TokenOut):
    """The new token's record and its secret: shown this once, kept nowhere."""

    token: str


class UserIn(_Strict):
    name: _Name
    team: _Name | None = None
    role: Literal["admin", "user"] = "user"
    unix_user: _Name | None = Field(None, description="whom the jobs run as [the name]")


class UserOut(BaseModel):
    name: str
    role: str
    team: str
    unix_user: str | None
    disabled: bool
    created_at: float


class TeamIn(_Strict):
    name: _Name


class TeamOut(BaseModel):
    name: str
    created_at: float
