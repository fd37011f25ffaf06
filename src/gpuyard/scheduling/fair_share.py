"""Fair share: who is owed GPUs, from admin-set shares and decayed past usage (stdlib only).

Shares are two-level, as Slurm's classic fair-share tree: a user's normalised share is their
team's part of all teams' shares times their part of their team's. Every share defaults to 1.
Usage is allocated GPU time decayed with a half-life (Slurm's PriorityDecayHalfLife): a
GPU-hour used one half-life ago counts half. The factor is 2^(-U/S) (U: the user's part of all
decayed usage, S: their normalised share): 1 for someone who used nothing, 0.5 for someone who
used exactly their share, toward 0 beyond.

Worked example. Teams vision (shares 3) and nlp (1); alice and bob in vision, carol in nlp,
every user share 1. S(alice) = 3/4 x 1/2 = 0.375, S(carol) = 1/4 = 0.25. Decayed usage: alice 60,
bob 20, carol 20 GPU-h (100 in all): U(alice) = 0.6, factor 2^(-0.6/0.375) = 0.33; carol
U = 0.2, factor 2^(-0.2/0.25) = 0.57: carol's jobs rank before alice's.

With every share equal and no teams (a trace's users), S = 1/users: exactly what `fairshare`
computed before shares existed, so its decisions do not change.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Shares:
    """Admin-set weights (default 1) and the team of each user (None: no team). Immutable."""

    users: Mapping[str, float] = field(default_factory=dict)
    teams: Mapping[str, float] = field(default_factory=dict)
    team_of: Mapping[str, str] = field(default_factory=dict)
    half_life_s: float | None = None  # usage decay for `fairshare` (None: the policy's own)

    @property
    def uniform(self) -> bool:
        """Every share equal and no teams: the policies decide as they did without shares."""
        return not self.team_of and all(v == 1.0 for v in (*self.users.values(),
                                                             *self.teams.values()))  # fmt: skip

    def normalised(self, users: Iterable[str]) -> dict[str, float]:
        """Each of `users`' part of the whole (they sum to 1): team part x part in the team."""
        users = sorted(set(users))
        if not users:
            return {}
        by_team: dict[str | None, list[str]] = {}
        for user in users:
            by_team.setdefault(self.team_of.get(user), []).append(user)
        team_w = {t: (self.teams.get(t, 1.0) if t is not None else 1.0) for t in by_team}
        if len(by_team) == 1 and None in by_team:  # no teams: users share directly
            team_w = {None: 1.0}
        total_t = sum(team_w.values()) or 1.0
        out: dict[str, float] = {}
        for team, members in by_team.items():
            weights = {u: self.users.get(u, 1.0) for u in members}
            total_u = sum(weights.values()) or 1.0
            for user, w in weights.items():
                out[user] = team_w[team] / total_t * w / total_u
        return out


def factor(usage_part: float, share: float) -> float:
    """Slurm's fair-share factor 2^(-U/S); 0 for a user with no share."""
    if share <= 0:
        return 0.0
    return float(2.0 ** (-usage_part / share))


def decayed_gpu_s(gpus: int, start: float, end: float, now: float, half_life_s: float) -> float:
    """GPU-seconds of a run over [start, end], each second weighted 0.5^(age / half-life) at
    `now`: the exact integral (gpus x h/ln2 x (0.5^((now-end)/h) - 0.5^((now-start)/h)))."""
    end = min(end, now)
    if end <= start:
        return 0.0
    h = half_life_s
    return float(gpus * h / math.log(2) * (0.5 ** ((now - end) / h) - 0.5 ** ((now - start) / h)))


@dataclass(frozen=True, slots=True)
class ShareRow:
    """One user's line of `gpuyard share` (as `sshare`)."""

    user: str
    team: str | None
    raw_shares: float
    norm_shares: float
    raw_usage_gpu_h: float  # decayed GPU-hours
    norm_usage: float  # part of everyone's decayed usage
    factor: float


def share_table(
    shares: Shares,
    usage_gpu_s: Mapping[str, float],
    users: Iterable[str] = (),
) -> list[ShareRow]:
    """Every user with usage or listed in `users`: shares, usage and factor, by user."""
    everyone = set(usage_gpu_s) | set(users)
    norm = shares.normalised(everyone)
    total = sum(usage_gpu_s.values()) or 1.0
    rows = []
    for user in sorted(everyone):
        used = usage_gpu_s.get(user, 0.0)
        rows.append(ShareRow(
            user, shares.team_of.get(user), shares.users.get(user, 1.0), norm[user],
            used / 3600.0, used / total, factor(used / total, norm[user]),
        ))  # fmt: skip
    return rows


class DecayedUsage:
    """Each user's GPU time, decayed with a half-life, kept from the start/stop of their runs
    (no clock: `at(now)` integrates the GPUs they hold since the last change exactly).

    `start(user, gpus, now)` when a run takes GPUs, `stop` when it gives them back;
    `part(user, now)` is the user's part of everyone's decayed usage (0 with no usage yet).
    Deterministic for the same calls, so a live server and a replay agree to the bit."""

    __slots__ = ("_half_life_s", "_held", "_total", "_used")

    def __init__(self, half_life_s: float) -> None:
        self._half_life_s = half_life_s
        self._used: dict[str, tuple[float, float]] = {}  # user -> (decayed GPU-s, as of)
        self._held: dict[str, int] = {}  # user -> GPUs held now
        self._total: tuple[float, float, int] = (0.0, 0.0, 0)  # everyone's: value, as of, held

    @property
    def half_life_s(self) -> float:
        return self._half_life_s

    def _decay(self, value: float, since: float, held: int, now: float) -> float:
        if now <= since:
            return value
        h = self._half_life_s
        keep = float(0.5 ** ((now - since) / h))
        return value * keep + held * h / math.log(2) * (1.0 - keep)

    def _change(self, user: str, gpus: int, now: float) -> None:
        held = self._held.get(user, 0)
        value, since = self._used.get(user, (0.0, now))
        self._used[user] = (self._decay(value, since, held, now), now)
        self._held[user] = held + gpus
        total, t_since, t_held = self._total
        self._total = (self._decay(total, t_since, t_held, now), now, t_held + gpus)

    def start(self, user: str, gpus: int, now: float) -> None:
        if gpus:
            self._change(user, gpus, now)

    def stop(self, user: str, gpus: int, now: float) -> None:
        if gpus:
            self._change(user, -gpus, now)

    def gpu_s(self, user: str, now: float) -> float:
        """The user's decayed GPU-seconds at `now`."""
        value, since = self._used.get(user, (0.0, now))
        return self._decay(value, since, self._held.get(user, 0), now)

    def part(self, user: str, now: float) -> float:
        """The user's part (0-1) of everyone's decayed GPU-seconds at `now`."""
        total, since, held = self._total
        total = self._decay(total, since, held, now)
        return self.gpu_s(user, now) / total if total > 0 else 0.0
