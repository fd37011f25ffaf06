"""Webhooks' use cases: the journal's observer that queues jobs' events, settings, log, a ping.

The sender (`webhook_sender.py`: the path of an event, its delivery and retries) takes what the
observer queues; `webhook_settings.py` caches the settings both read; `domain/webhooks.py` says
which event a change is, where it goes, how it is signed; `adapters/webhook.py` POSTs.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import replace

from gpuyard.domain.errors import Forbidden, InvalidRequest, NotFound
from gpuyard.domain.principal import Principal
from gpuyard.domain.spec_rules import check_notify
from gpuyard.domain.webhooks import (
    PING,
    Delivery,
    NotifyKind,
    NotifySettings,
    UrlPolicy,
    events_of,
)
from gpuyard.services.access.rules import is_admin, may_see_entry, redact_notify, sees_everyone
from gpuyard.services.jobs.journal import JobChange
from gpuyard.services.ports import WebhookPoster
from gpuyard.services.stores import NotifyStore
from gpuyard.services.workflows.webhook_sender import (
    MAX_LOG,
    QUEUE_SIZE,
    RETRY_FIRST_S,
    TRIES,
    WORKERS,
    WebhookSender,
    new_delivery_id,
)
from gpuyard.services.workflows.webhook_settings import SettingsCache, new_secret

log = logging.getLogger("gpuyard.notify")


class NotifyService:
    """The journal's observer (it queues events for `sender`) and the settings, log and test
    use cases over the settings `cache` the sender reads."""

    def __init__(
        self,
        store: NotifyStore,
        policy: UrlPolicy,
        cache: SettingsCache,
        sender: WebhookSender,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._store = store
        self.policy = policy
        self.cache = cache
        self.sender = sender  # the server's Background: started and stopped with it
        self._clock = clock
        self.team_exists: Callable[[str], bool] = lambda _team: True
        self.dropped = 0  # events a full queue refused

    # -- the journal's observer (in order: cheap, never blocks) --------------------------
    def __call__(self, change: JobChange) -> None:
        job = change.after
        if not job.spec.notify and not self.cache.any_defaults:
            return
        events = events_of(change.before, job)
        if not events:
            return
        if not self.sender.offer(job, events, change.at):
            self.dropped += 1
            if self.dropped in (1, 10, 100) or self.dropped % 1000 == 0:
                log.warning(
                    "webhooks: %d event(s) dropped, the sender is behind (job %s %s)",
                    self.dropped, job.id, events[0],
                )  # fmt: skip

    # -- settings ------------------------------------------------------------------------
    def settings(self, actor: Principal) -> list[NotifySettings]:
        """The caller's own entry and their team's (admins: every entry), as the caller may
        see them (a team's URLs by host for a user). Secrets stay in: a route says only
        whether one is set."""
        entries = self.cache.entries()
        if sees_everyone(actor):
            return sorted(entries, key=lambda e: (e.kind, e.name))
        team = actor.team or self.cache.team_of(actor.user)
        return [
            redact_notify(actor, e) for e in entries if may_see_entry(actor, e.kind, e.name, team)
        ]

    def set(
        self,
        actor: Principal,
        urls: Sequence[str],
        events: Sequence[str] = (),
        team: str | None = None,
    ) -> tuple[NotifySettings, str | None]:
        """Set the caller's (or, for an admin, a team's) webhook URLs and events; returns the
        entry and its secret when this made the first one (shown once)."""
        kind, name = self._target(actor, team)
        urls, events = tuple(dict.fromkeys(urls)), tuple(dict.fromkeys(events))
        check_notify(urls, events)
        if not urls:
            raise InvalidRequest("notify: give at least one URL", field="urls")
        for url in urls:
            why = self.policy.refuses_name(url)
            if why is not None:
                raise InvalidRequest(f"notify: {url[:80]!r}: {why}", field="urls")
        now = self._clock()

        def with_urls(old: NotifySettings | None) -> NotifySettings:
            secret, secret_at = (old.secret, old.secret_at) if old else (None, None)
            if secret is None:
                secret, secret_at = new_secret(), now
            return NotifySettings(kind, name, urls, events, secret, now, secret_at)

        old, entry = self.cache.change(kind, name, with_urls)
        assert entry is not None
        made = entry.secret if old is None or old.secret is None else None
        return entry, made

    def clear(self, actor: Principal, team: str | None = None) -> None:
        """Forget the URLs and events (the secret stays: a later `set` signs with it); none
        set is no error."""
        kind, name = self._target(actor, team)

        def without_urls(old: NotifySettings | None) -> NotifySettings | None:
            if old is None or not old.urls:
                return None  # nothing to clear: as asked
            return replace(old, urls=(), events=(), updated_at=self._clock())

        self.cache.change(kind, name, without_urls)

    def rotate_secret(self, actor: Principal, team: str | None = None) -> NotifySettings:
        """A new secret for the caller (or a team, admins), returned once; deliveries sent
        from now on are signed with it, retries of older ones too."""
        kind, name = self._target(actor, team)
        now = self._clock()

        def rotated(old: NotifySettings | None) -> NotifySettings:
            base = old or NotifySettings(kind, name)
            return replace(base, secret=new_secret(), secret_at=now, updated_at=now)

        _, entry = self.cache.change(kind, name, rotated)
        assert entry is not None
        return entry

    def _target(self, actor: Principal, team: str | None) -> tuple[NotifyKind, str]:
        if team is None:
            return "user", actor.user
        if not is_admin(actor):
            raise Forbidden(
                f"only an admin sets team {team}'s webhooks; set your own without --team"
            )
        if not self.team_exists(team):
            raise NotFound(f"no team {team}; add it first: gpuyard admin team add {team}")
        return "team", team

    # -- the log and a test --------------------------------------------------------------
    def deliveries(self, actor: Principal, limit: int = 50) -> list[Delivery]:
        """The caller's deliveries, newest first."""
        return self._store.load_deliveries(actor.user, max(1, min(limit, MAX_LOG)))

    def test(self, actor: Principal, url: str | None = None) -> list[Delivery]:
        """A `ping` to `url` (else to each of the caller's default URLs), queued now."""
        if url is not None:
            check_notify((url,), ())
            why = self.policy.refuses_name(url)
            if why is not None:
                raise InvalidRequest(f"notify: {url[:80]!r}: {why}", field="url")
            urls: tuple[str, ...] = (url,)
        else:
            own = self.cache.get("user", actor.user)
            urls = own.urls if own is not None else ()
            if not urls:
                raise NotFound(
                    "you have no webhook set: give a URL (gpuyard notify test URL) or set one "
                    "(gpuyard notify set URL)"
                )
        now = self._clock()
        made = [
            Delivery(
                new_delivery_id(),
                actor.user,
                None,
                PING,
                u,
                f"user:{actor.user}",
                {},
                now,
                next_at=now,
                updated_at=now,
            )
            for u in urls
        ]
        self.cache.secret_of(f"user:{actor.user}")
        self._store.save_deliveries(made)
        self.sender.add_pending(made)
        return made


def make_notify(
    store: NotifyStore,
    poster: WebhookPoster,
    policy: UrlPolicy,
    *,
    clock: Callable[[], float] = time.time,
    retry_first_s: float = RETRY_FIRST_S,
    tries: int = TRIES,
    queue_size: int = QUEUE_SIZE,
    workers: int = WORKERS,
) -> NotifyService:
    """The use cases over one settings cache and the sender that reads it (the server's wiring,
    the tests', the bench's: one way to build them)."""
    cache = SettingsCache(store, clock)
    sender = WebhookSender(
        store, poster, cache, clock=clock, retry_first_s=retry_first_s, tries=tries,
        queue_size=queue_size, workers=workers,
    )  # fmt: skip
    return NotifyService(store, policy, cache, sender, clock=clock)
