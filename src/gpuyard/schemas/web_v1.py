"""API v1 wire models of the web dashboard's login: its session, a one-time login link."""

from __future__ import annotations

from pydantic import BaseModel


class SessionOut(BaseModel):
    """Who the dashboard's session is."""

    user: str
    role: str
    team: str | None
    scope: str


class LoginOut(SessionOut):
    """A JSON login's answer: who, and the page key the page keeps in its own origin's storage
    and sends in `X-Session-Key` with every request (the cookie alone admits nobody)."""

    key: str


class LoginLinkOut(BaseModel):
    """A one-time login for the dashboard: open `path` on this server's URL within
    `expires_in_s` (once)."""

    path: str
    url: str  # the path on this server's address as the request named it (or as it listens)
    expires_in_s: int
    user: str
