"""The stores a server is built with: one Protocol per kind of durable record besides jobs
(`ports.JobStore`), and `Stores`, the bundle a backend gives with None for what it lacks."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from gpuyard.domain.accounts import Account, ApiToken, Team
from gpuyard.domain.job import Job
from gpuyard.domain.limits import AccountLimits, LimitKind
from gpuyard.domain.principal import Scope
from gpuyard.domain.progress_series import ProgressPoint
from gpuyard.domain.sweep import SweepRecord
from gpuyard.domain.webhooks import Delivery, NotifyKind, NotifySettings
from gpuyard.services.ports import JobStore


class AccountStore(Protocol):
    """Durable accounts, teams and API tokens (rare writes, each durable before it returns).
    The stores that implement JobStore implement this too (one database); `tests/contract/`
    runs one suite over them. A token's secret never reaches the store: only its hash."""

    def load_teams(self) -> list[Team]:
        """Every team, by name."""
        ...

    def add_team(self, team: Team) -> None:
        """Raises Conflict if a team of that name exists."""
        ...

    def load_accounts(self) -> list[Account]:
        """Every account, disabled ones included, by name."""
        ...

    def add_account(self, account: Account) -> None:
        """Raises Conflict if an account of that name exists (its team must exist)."""
        ...

    def save_account(self, account: Account) -> None:
        """Replace an existing account's fields (role, team, Unix user, disabled); NotFound
        if there is none of that name."""
        ...

    def load_tokens(self) -> list[ApiToken]:
        """Every token ever made, revoked and expired ones included, by id."""
        ...

    def add_token(
        self, user: str, scope: Scope, token_hash: str, created_at: float,
        expires_at: float | None,
    ) -> ApiToken:  # fmt: skip
        """Record a new token of `user`; its id is new (never one given before). Conflict if
        the hash is already stored."""
        ...

    def revoke_token(self, token_id: int, at: float) -> None:
        """Mark a token revoked at `at` (kept for `token list`); NotFound if there is none."""
        ...

    def touch_tokens(self, last_used: Mapping[int, float]) -> None:
        """Record when tokens were last used (`{token id: time}`; unknown ids are ignored)."""
        ...


class LimitStore(Protocol):
    """Quotas and fair-share weights per user and team (`domain/limits.py`), as admins set them.
    The stores that implement JobStore implement this too; `tests/contract/` covers both."""

    def load_limits(self) -> list[AccountLimits]:
        """Every entry, by kind then name."""
        ...

    def save_limits(self, entry: AccountLimits) -> None:
        """Create or replace the entry of (kind, name)."""
        ...

    def clear_limits(self, kind: LimitKind, name: str) -> None:
        """Remove the entry of (kind, name); NotFound if there is none."""
        ...


class UsageStore(Protocol):
    """What `gpuyard usage` reads: the stores that implement JobStore implement this too."""

    def usage_jobs(
        self, since: float, owner: str | None = None
    ) -> list[tuple[Job, dict[str, Any] | None]]:
        """Every job that held GPUs at or after `since` (started, or preempted before; running
        or ended since), of `owner` (None: anyone's), by id, each with its saved GPU stats
        (None: none saved)."""
        ...


@dataclass(frozen=True, slots=True)
class GpuBucket:
    """One GPU's telemetry over `resolution_s` seconds from `at` (epoch): the means and peaks
    of its samples (None: n/a in every sample) and the jobs that held it meanwhile."""

    gpu_uuid: str
    at: float
    resolution_s: int
    util_pct: float | None
    util_peak_pct: float | None
    mem_used_mib: float | None
    mem_peak_mib: float | None
    temp_c: float | None
    power_w: float | None
    holders: tuple[int, ...] = ()


class GpuHistoryStore(Protocol):
    """GPU telemetry older than the server's in-memory ring (`services/machine/gpu_history.py`), in
    buckets: charts of past jobs, after a restart too. The stores that implement JobStore
    implement this too; `tests/contract/test_gpu_history_store.py` covers them."""

    def save_gpu_buckets(self, buckets: Sequence[GpuBucket]) -> None:
        """Write them in one transaction; a bucket of the same (GPU, resolution, at) as one
        already saved replaces it (a restart within a minute writes that minute again)."""
        ...

    def load_gpu_buckets(self, gpu_uuid: str, since: float, until: float) -> list[GpuBucket]:
        """The GPU's buckets with `since <= at < until`, oldest first."""
        ...

    def prune_gpu_buckets(self, before: float) -> int:
        """Delete every GPU's buckets with `at < before`; how many went."""
        ...


class ProgressStore(Protocol):
    """Jobs' progress timelines (`domain/progress_series.py`: at most a few thousand points a
    job), written in batches by the progress service. The stores that implement JobStore
    implement this too; `tests/contract/test_progress_store.py` covers them."""

    def save_progress(
        self, points: Sequence[tuple[int, ProgressPoint]], replace: Collection[int] = ()
    ) -> None:
        """In one transaction: the stored points of the jobs in `replace` deleted, then each
        `(job id, point)` written, replacing the job's point of the same `at`."""
        ...

    def load_progress(self, job_id: int) -> list[ProgressPoint]:
        """A job's stored points, oldest first ([] for none)."""
        ...


class SweepStore(Protocol):
    """Sweeps' definitions (`workflows/sweeps.py`), by their job array's id. The stores that
    implement JobStore implement this too; `tests/contract/test_sweep_store.py` covers them."""

    def save_sweep(self, record: SweepRecord) -> None:
        """Create the sweep (Conflict if one has its id)."""
        ...

    def load_sweeps(self) -> list[SweepRecord]:
        """Every sweep, by id."""
        ...


class NotifyStore(Protocol):
    """Webhook settings per user and team and the delivery log (`services/workflows/notify.py`). The
    stores that implement JobStore implement this too; `tests/contract/test_notify_store.py`
    covers them."""

    def load_notify_settings(self) -> list[NotifySettings]:
        """Every entry, by kind then name."""
        ...

    def save_notify_settings(self, entry: NotifySettings) -> None:
        """Create or replace the entry of (kind, name)."""
        ...

    def clear_notify_settings(self, kind: NotifyKind, name: str) -> None:
        """Remove the entry of (kind, name); NotFound if there is none."""
        ...

    def save_deliveries(self, deliveries: Sequence[Delivery]) -> None:
        """Create or replace each (by id), in one transaction."""
        ...

    def load_deliveries(self, owner: str | None, limit: int) -> list[Delivery]:
        """The newest `limit` deliveries of `owner` (None: anyone's), newest first."""
        ...

    def load_pending_deliveries(self) -> list[Delivery]:
        """Every delivery still `pending`, oldest first (a restart retries them)."""
        ...

    def prune_deliveries(self, before: float, keep_per_owner: int) -> int:
        """Delete finished deliveries made before `before`, and each owner's beyond their
        newest `keep_per_owner`; how many went. Pending ones stay."""
        ...


@dataclass(frozen=True, slots=True)
class Event:
    """One event of the dashboard's events page (`services/machine/event_ring.py`).
    `job_id`/`owner`/`name` for a job's (what the queue shows everyone: never the command or
    the log), `gpu` for a GPU's."""

    id: int
    at: float  # epoch seconds
    kind: str
    message: str
    job_id: int | None = None
    owner: str | None = None
    name: str | None = None
    gpu: int | None = None

    def to_wire(self) -> dict[str, object]:
        return {
            "id": self.id, "at": self.at, "kind": self.kind, "message": self.message,
            "job_id": self.job_id, "owner": self.owner, "name": self.name, "gpu": self.gpu,
        }  # fmt: skip


class EventStore(Protocol):
    """The events page's last events, kept across restarts (bounded: the ring prunes what it
    no longer holds). The stores that implement JobStore implement this too;
    `tests/contract/test_event_store.py` covers them."""

    def save_events(self, events: Sequence[Event]) -> None:
        """Write them in one transaction (an id already saved is replaced)."""
        ...

    def load_events(self, limit: int) -> list[Event]:
        """The newest `limit` events, oldest first."""
        ...

    def prune_events(self, below_id: int) -> int:
        """Delete the events with an id below `below_id`; how many went."""
        ...


@dataclass(frozen=True, slots=True)
class Stores:
    """What a backend stores, by port (`SqlJobStore.stores()`, `MemoryJobStore.stores()`):
    None where it lacks one, and the services over that port are not built."""

    jobs: JobStore
    accounts: AccountStore | None = None
    limits: LimitStore | None = None
    usage: UsageStore | None = None
    gpu_history: GpuHistoryStore | None = None
    progress: ProgressStore | None = None
    sweeps: SweepStore | None = None
    notify: NotifyStore | None = None
    events: EventStore | None = None
