"""API v1 wire models of the web dashboard's login: its session, a one-time login link."""

from __future__ import annotations

from pydantic import BaseModel


class SessionOut(BaseModel):
    """Who the dashboard's session is, and the CSRF token its changes carry."""

    user: str
    role: str
    team: str | None
    scope: str
    csrf: str


class LoginLinkOut(BaseModel):
    """A one-time login for the dashboard: open `path` on this server's URL within
    `expires_in_s` (once)."""

    path: str
    url: str  # the path on this server's address as the request named it (or as it listens)
    expires_in_s: int
    user: str
