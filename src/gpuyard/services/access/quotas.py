"""Quotas, fair share and accounting as use cases: what admins set per user and team (limits and
shares, kept in the store), `gpuyard share` (as `sshare`) and `gpuyard usage` (as `sreport`).

The rules live in pure code (`scheduling/quotas.py`, `scheduling/fair_share.py`,
`domain/usage.py`); this service keeps the store's entries and the scheduler in step: every
change is written, then the whole rule set is rebuilt and swapped into the live scheduler
(`set_quotas`, `set_shares`), which applies it at its next pass. Teams come from the accounts;
a submitter's team is also noted at submit (`note_team`), so a user added to a team after the
rules were built is counted in it from their next job on.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Literal

from gpuyard.domain.errors import InvalidRequest, NotFound
from gpuyard.domain.limits import DEFAULT_WINDOW_S, AccountLimits, LimitKind
from gpuyard.domain.principal import Principal
from gpuyard.domain.usage import UsageRow, summarise
from gpuyard.scheduling.fair_share import ShareRow, Shares, decayed_gpu_s, share_table
from gpuyard.scheduling.quotas import Limits, QuotaRules
from gpuyard.services.access.rules import (
    may_see_entry,
    owns,
    report_owner,
    require_admin,
    sees_everyone,
)
from gpuyard.services.scheduler.live import LiveScheduler
from gpuyard.services.stores import AccountStore, LimitStore, UsageStore

DEFAULT_HALF_LIFE_S = 7 * 86400.0
# Usage older than this many half-lives weighs under 0.1%: `share` reads no further back.
_HALF_LIVES_READ = 10


class LimitService:
    """Admin-set limits and shares, kept in the store and given to the live scheduler."""

    def __init__(
        self,
        store: LimitStore,
        accounts: AccountStore,
        usage: UsageStore,
        scheduler: LiveScheduler,
        clock: Callable[[], float],
        *,
        half_life_s: float = DEFAULT_HALF_LIFE_S,
    ) -> None:
        self._store = store
        self._accounts = accounts  # teams and who is in which
        self._usage = usage  # past jobs' GPU time, for shares and `gpuyard usage`
        self._scheduler = scheduler
        self._clock = clock
        self.half_life_s = half_life_s
        self._lock = threading.Lock()  # one change at a time (held over one write)
        # Leaf: one publish at a time, never held over a store call (a submit on the event
        # loop takes it: a stalled database must not stall the loop).
        self._publish_lock = threading.Lock()
        self._team_of: dict[str, str] = {}
        self._entries: list[AccountLimits] = []  # what was published last

    def load(self) -> None:
        """Read the entries and teams from the store and give the scheduler its rules."""
        with self._lock:
            self._team_of = {a.name: a.team for a in self._accounts.load_accounts()}
            self._publish(self._store.load_limits())

    def _publish(self, entries: list[AccountLimits]) -> None:
        with self._publish_lock:
            self._entries = entries
            self._publish_locked()

    def _publish_locked(self) -> None:
        entries = self._entries
        users: dict[str, Limits] = {}
        teams: dict[str, Limits] = {}
        user_shares: dict[str, float] = {}
        team_shares: dict[str, float] = {}
        for e in entries:
            limits = Limits(e.max_gpus, e.max_pending, e.max_gpu_hours, e.window_s)
            if not limits.empty:
                (users if e.kind == "user" else teams)[e.name] = limits
            if e.shares is not None:
                (user_shares if e.kind == "user" else team_shares)[e.name] = e.shares
        team_of = dict(self._team_of)
        self._scheduler.set_quotas(QuotaRules(users, teams, team_of))
        self._scheduler.set_shares(Shares(user_shares, team_shares, team_of, self.half_life_s))

    def note_team(self, user: str, team: str | None) -> None:
        """A submitter's team (from their account): counted in it from now on."""
        if team is None or self._team_of.get(user) == team:
            return
        # The entries published last, not the store's: every change of them comes through
        # this service, and a submit must not wait for the database (issue 22).
        with self._publish_lock:
            self._team_of[user] = team
            self._publish_locked()

    # -- admin ----------------------------------------------------------------------------
    def set_limits(
        self,
        actor: Principal,
        kind: LimitKind,
        name: str,
        *,
        max_gpus: int | None = None,
        max_pending: int | None = None,
        max_gpu_hours: float | None = None,
        window_s: float | None = None,
        shares: float | None = None,
    ) -> AccountLimits:
        """Set some of a user's or team's limits (the others stay as they were)."""
        require_admin(actor, "set limits")
        self._check_exists(kind, name)
        for what, value in (("--max-gpus", max_gpus), ("--max-pending", max_pending)):
            if value is not None and value < 0:
                raise InvalidRequest(f"{what} must be 0 or more, not {value}")
        for what, fvalue in (("--max-gpu-hours", max_gpu_hours), ("--window", window_s),
                             ("--shares", shares)):  # fmt: skip
            if fvalue is not None and not fvalue > 0:
                raise InvalidRequest(f"{what} must be more than 0, not {fvalue:g}")
        with self._lock:
            entries = self._store.load_limits()
            old = next((e for e in entries if (e.kind, e.name) == (kind, name)), None)
            entry = old or AccountLimits(kind, name)
            entry = replace(
                entry,
                max_gpus=entry.max_gpus if max_gpus is None else max_gpus,
                max_pending=entry.max_pending if max_pending is None else max_pending,
                max_gpu_hours=entry.max_gpu_hours if max_gpu_hours is None else max_gpu_hours,
                window_s=entry.window_s if window_s is None else window_s,
                shares=entry.shares if shares is None else shares,
                updated_at=self._clock(),
            )
            self._store.save_limits(entry)
            self._publish([e for e in entries if e is not old] + [entry])
            return entry

    def clear(self, actor: Principal, kind: LimitKind, name: str) -> None:
        """Forget every limit and the share of a user or team (NotFound if none was set)."""
        require_admin(actor, "clear limits")
        with self._lock:
            self._store.clear_limits(kind, name)
            self._publish(self._store.load_limits())

    def limits(self, actor: Principal) -> list[AccountLimits]:
        """Every entry (admins); a user sees their own and their team's."""
        team = actor.team or self._team_of.get(actor.user)
        return [e for e in self._store.load_limits() if may_see_entry(actor, e.kind, e.name, team)]

    def _check_exists(self, kind: LimitKind, name: str) -> None:
        if kind == "team":
            if name not in {t.name for t in self._accounts.load_teams()}:
                raise NotFound(f"no team {name}; add it first: gpuyard admin team add {name}")
        elif name not in {a.name for a in self._accounts.load_accounts()}:
            raise NotFound(f"no user {name}; add them first: gpuyard admin user add {name}")

    # -- reports --------------------------------------------------------------------------
    def share(self, actor: Principal) -> list[ShareRow]:
        """Each user's share, decayed usage and fair-share factor (as `sshare`): every user for
        an admin, one's own row for anyone else."""
        now = self._clock()
        h = self.half_life_s
        used: dict[str, float] = {}
        for job, _ in self._usage.usage_jobs(now - _HALF_LIVES_READ * h):
            start = job.started_at
            if start is not None:
                end = now if job.ended_at is None else job.ended_at
                gpu_s = decayed_gpu_s(job.spec.gpus, start, end, now, h)
            else:
                gpu_s = 0.0
            # Earlier runs (preempted): charged as if they ended when the last run began.
            at = start if start is not None else now
            gpu_s += job.attained_gpu_s * 0.5 ** ((now - at) / h)
            used[job.owner] = used.get(job.owner, 0.0) + gpu_s
        accounts = self._accounts.load_accounts()
        entries = self._store.load_limits()
        team_of = {**{a.name: a.team for a in accounts}, **self._team_of}
        shares = Shares(
            {e.name: e.shares for e in entries if e.kind == "user" and e.shares is not None},
            {e.name: e.shares for e in entries if e.kind == "team" and e.shares is not None},
            team_of,
        )  # fmt: skip
        rows = share_table(shares, used, [a.name for a in accounts if not a.disabled])
        return rows if sees_everyone(actor) else [r for r in rows if owns(actor, r.user)]

    def usage(
        self,
        actor: Principal,
        *,
        by: Literal["user", "team"] = "user",
        since: float | None = None,
    ) -> list[UsageRow]:
        """GPU-hours allocated and used, jobs by state, mean utilisation since `since` (None:
        the default window, 7 days), by user or team: every user's for an admin, one's own
        otherwise."""
        now = self._clock()
        since = now - DEFAULT_WINDOW_S if since is None else since
        if not math.isfinite(since):
            raise InvalidRequest("--since must be a time (Unix seconds)", field="since")
        if since > now:
            raise InvalidRequest("--since is in the future")
        records = self._usage.usage_jobs(since, report_owner(actor))
        key_of = None
        if by == "team":
            key_of = {**{a.name: a.team for a in self._accounts.load_accounts()}, **self._team_of}
        return summarise(records, since=since, now=now, key_of=key_of)
