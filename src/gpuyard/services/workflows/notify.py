"""Webhooks as use cases: what users and teams set once, the delivery of jobs' events, and the
delivery log (`domain/webhooks.py` says which event a change is, where it goes, how it is
signed; `adapters/webhook.py` POSTs).

The path of an event:
1. the journal's *in-order* observer (`observe`, under the journal's lock, in commit order)
   only asks whether the change is an event someone may want (a job naming webhooks, or any
   default set) and puts it on a bounded queue: never a read, never a block. A full queue
   (10,000 events the sender has not taken) drops the event with a warning, counted;
2. the sender thread takes it, finds its targets (the job's URLs, else its owner's defaults,
   else their team's) and *stores* one delivery per URL before sending any (a restart finds
   the pending ones and sends them);
3. workers POST (4 at a time, 5 s timeout each): a 2xx is delivered; anything else is tried
   again after 40 s, 80 s, 160 s, 320 s (five tries over about ten minutes), then it is
   `failed`; a host the server's allow-list refuses fails at once. Deliveries of one job to one
   URL are sent one after the other, in the order of the changes (begin before end), each
   waiting for the one before to be delivered or given up;
4. a job that begins with a time limit gets a `time_limit` warning at 90% of it (planned by
   the sender when it takes the begin, dropped by the job's next change).
"""

from __future__ import annotations

import logging
import queue
import secrets
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace

from gpuyard.domain.errors import Forbidden, InvalidRequest, NotFound
from gpuyard.domain.job import Job
from gpuyard.domain.principal import Principal
from gpuyard.domain.spec_rules import check_notify
from gpuyard.domain.states import JobState
from gpuyard.domain.webhooks import (
    PING,
    Delivery,
    NotifyKind,
    NotifySettings,
    Target,
    UrlPolicy,
    body_of,
    events_of,
    headers_of,
    job_summary,
    retry_delay_s,
    targets_of,
)
from gpuyard.services.access.rules import is_admin, may_see_entry, redact_notify, sees_everyone
from gpuyard.services.jobs.journal import JobChange
from gpuyard.services.ports import PostResult, WebhookPoster
from gpuyard.services.stores import NotifyStore

log = logging.getLogger("gpuyard.notify")

TRIES = 5
RETRY_FIRST_S = 40.0
QUEUE_SIZE = 10_000
WORKERS = 4
KEEP_PER_OWNER = 1_000
KEEP_S = 30 * 86400.0
PRUNE_EVERY_S = 3600.0
WARN_AT = 0.9  # the share of a job's time limit at which `time_limit` warns
MAX_LOG = 1_000


@dataclass(frozen=True, slots=True)
class _Event:
    job: Job
    events: tuple[str, ...]
    at: float


class NotifyService:
    """Settings, deliveries and the sender thread (a `Background` of the server's)."""

    def __init__(
        self,
        store: NotifyStore,
        poster: WebhookPoster,
        policy: UrlPolicy,
        *,
        clock: Callable[[], float] = time.time,
        retry_first_s: float = RETRY_FIRST_S,
        tries: int = TRIES,
        queue_size: int = QUEUE_SIZE,
        workers: int = WORKERS,
    ) -> None:
        self._store = store
        self._poster = poster
        self.policy = policy
        self._clock = clock
        self.retry_first_s = retry_first_s
        self.tries = tries
        self.workers = workers
        # Who is in which team (set by the server once accounts exist; None: no team).
        self.team_of: Callable[[str], str | None] = lambda _user: None
        self.team_exists: Callable[[str], bool] = lambda _team: True
        self._queue: queue.Queue[_Event] = queue.Queue(maxsize=queue_size)
        self.dropped = 0  # events a full queue refused
        self._lock = threading.Lock()  # the settings cache and the pending list
        self._settings: dict[tuple[str, str], NotifySettings] = {
            (e.kind, e.name): e for e in store.load_notify_settings()
        }
        self._any_defaults = any(e.urls for e in self._settings.values())
        self._pending: list[Delivery] = []  # oldest first
        self._in_flight: set[str] = set()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._work: queue.Queue[Delivery] = queue.Queue()  # due, for the workers
        self._workers: list[threading.Thread] = []
        self._last_prune = 0.0
        self._warnings: dict[int, _Event] = {}  # job id -> its time-limit warning (sender's)

    # -- the journal's observer (in order: cheap, never blocks) --------------------------
    def __call__(self, change: JobChange) -> None:
        job = change.after
        if not job.spec.notify and not self._any_defaults:
            return
        events = events_of(change.before, job)
        if not events:
            return
        try:
            self._queue.put_nowait(_Event(job, events, change.at))
        except queue.Full:
            self.dropped += 1
            if self.dropped in (1, 10, 100) or self.dropped % 1000 == 0:
                log.warning(
                    "webhooks: %d event(s) dropped, the sender is behind (job %s %s)",
                    self.dropped, job.id, events[0],
                )  # fmt: skip
            return
        self._wake.set()

    # -- settings ------------------------------------------------------------------------
    def settings(self, actor: Principal) -> list[NotifySettings]:
        """The caller's own entry and their team's (admins: every entry), as the caller may
        see them (a team's URLs by host for a user). Secrets stay in: a route says only
        whether one is set."""
        with self._lock:
            entries = list(self._settings.values())
        if sees_everyone(actor):
            return sorted(entries, key=lambda e: (e.kind, e.name))
        team = actor.team or self.team_of(actor.user)
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
        with self._lock:
            old = self._settings.get((kind, name))
            made = None
            secret, secret_at = (old.secret, old.secret_at) if old else (None, None)
            if secret is None:
                secret, secret_at = new_secret(), now
                made = secret
            entry = NotifySettings(kind, name, urls, events, secret, now, secret_at)
            self._store.save_notify_settings(entry)
            self._settings[(kind, name)] = entry
            self._any_defaults = True
        return entry, made

    def clear(self, actor: Principal, team: str | None = None) -> None:
        """Forget the URLs and events (the secret stays: a later `set` signs with it); none
        set is no error."""
        kind, name = self._target(actor, team)
        with self._lock:
            old = self._settings.get((kind, name))
            if old is None or not old.urls:
                return  # nothing to clear: as asked
            entry = replace(old, urls=(), events=(), updated_at=self._clock())
            self._store.save_notify_settings(entry)
            self._settings[(kind, name)] = entry
            self._any_defaults = any(e.urls for e in self._settings.values())

    def rotate_secret(self, actor: Principal, team: str | None = None) -> NotifySettings:
        """A new secret for the caller (or a team, admins), returned once; deliveries sent
        from now on are signed with it, retries of older ones too."""
        kind, name = self._target(actor, team)
        now = self._clock()
        with self._lock:
            old = self._settings.get((kind, name)) or NotifySettings(kind, name)
            entry = replace(old, secret=new_secret(), secret_at=now, updated_at=now)
            self._store.save_notify_settings(entry)
            self._settings[(kind, name)] = entry
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
            with self._lock:
                own = self._settings.get(("user", actor.user))
            urls = own.urls if own is not None else ()
            if not urls:
                raise NotFound(
                    "you have no webhook set: give a URL (gpuyard notify test URL) or set one "
                    "(gpuyard notify set URL)"
                )
        now = self._clock()
        made = [
            Delivery(
                _new_id(),
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
        self._ensure_secret(f"user:{actor.user}")
        self._store.save_deliveries(made)
        with self._lock:
            self._pending.extend(made)
        self._wake.set()
        return made

    # -- the sender ----------------------------------------------------------------------
    def start(self) -> None:
        """Take the deliveries a stopped server left pending (due now), then send."""
        now = self._clock()  # due at once: the receiver may well have been fine all along
        pending = [replace(d, next_at=min(d.next_at, now))
                   for d in self._store.load_pending_deliveries()]  # fmt: skip
        with self._lock:
            known = {d.id for d in self._pending}
            self._pending[:0] = [d for d in pending if d.id not in known]
        self._workers = [
            threading.Thread(target=self._work_loop, name=f"gpuyard-webhook-{n}", daemon=True)
            for n in range(self.workers)
        ]
        self._thread = threading.Thread(target=self._run, name="gpuyard-notify", daemon=True)
        for thread in (*self._workers, self._thread):
            thread.start()

    def stop(self) -> None:
        """Stop taking and sending; a POST under way is not waited for (it is pending in the
        store: the next start sends it again, receivers dedup by X-Gpuyard-Delivery)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _work_loop(self) -> None:
        while not self._stop.is_set():
            try:
                delivery = self._work.get(timeout=0.5)
            except queue.Empty:
                continue
            self._send(delivery)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()  # before the round: a wake-up during it is not lost
            try:
                self.step()
            except Exception:  # a database hiccup: the next round tries again
                log.exception("webhooks: a round of deliveries failed")
            self._wake.wait(self._next_wait())

    def step(self) -> int:
        """One round: take queued events into stored deliveries, send what is due; returns
        how many were sent off to the workers (the tests drive it without the thread)."""
        self._take_events()
        now = self._clock()
        if now - self._last_prune > PRUNE_EVERY_S:
            self._last_prune = now
            self._store.prune_deliveries(now - KEEP_S, KEEP_PER_OWNER)
        due = self._due(now)
        for d in due:
            if self._workers:
                self._work.put(d)
            else:  # no threads (a test's rig): sent here, in order
                self._send(d)
        return len(due)

    def _take_events(self) -> None:
        made: list[Delivery] = []
        while True:
            try:
                event = self._queue.get_nowait()
            except queue.Empty:
                break
            made += self._deliveries_of(event)
            self._plan_warning(event)
        now = self._clock()
        for job_id, warning in list(self._warnings.items()):
            if warning.at <= now:
                del self._warnings[job_id]
                made += self._deliveries_of(warning)
        if made:
            try:
                for signer in dict.fromkeys(d.signer for d in made):
                    self._ensure_secret(signer)
                self._store.save_deliveries(made)  # stored before any is sent
            except Exception:  # the database: sent all the same, only a restart forgets them
                log.exception("webhooks: storing %d deliveries failed; sending them", len(made))
            with self._lock:
                self._pending.extend(made)

    def _deliveries_of(self, event: _Event) -> list[Delivery]:
        job = event.job
        with self._lock:
            user = self._settings.get(("user", job.owner))
        team_name = self.team_of(job.owner) if not job.spec.notify else None
        with self._lock:
            team = self._settings.get(("team", team_name)) if team_name else None
        out = []
        summary = job_summary(job)
        for target in targets_of(job, user, team):
            chosen = _first_wanted(event.events, target)
            if chosen is not None:
                out.append(
                    Delivery(
                        _new_id(),
                        job.owner,
                        job.id,
                        chosen,
                        target.url,
                        target.signer,
                        summary,
                        event.at,
                        next_at=event.at,
                        updated_at=event.at,
                    )
                )
        return out

    def resume_warnings(self, running: Iterable[Job]) -> None:
        """At a restart, before the sender starts: the time-limit warnings of the jobs still
        running (one whose time passed while the server was down is sent at once, unless the
        delivery log shows it was sent before)."""
        now = self._clock()
        for job in running:
            if job.state is not JobState.RUNNING or not (job.spec.notify or self._any_defaults):
                continue
            self._plan_warning(_Event(job, ("begin",), job.started_at or 0.0))
            warning = self._warnings.get(job.id)
            if warning is not None and warning.at <= now and self._warned(job):
                del self._warnings[job.id]

    def _warned(self, job: Job) -> bool:
        started = job.started_at or 0.0
        return any(
            d.job_id == job.id and d.event == "time_limit" and d.created_at >= started
            for d in self._store.load_deliveries(job.owner, MAX_LOG)
        )

    def _plan_warning(self, event: _Event) -> None:
        """A job that begins with a time limit is warned (`time_limit`, the job RUNNING) at
        WARN_AT of it, as Slurm's TIME_LIMIT_90 mail; any later change of the job cancels
        the warning. Kept in memory (a restart plans them again: `resume_warnings`)."""
        job = event.job
        self._warnings.pop(job.id, None)
        if event.events == ("begin",) and job.spec.time_limit_s and job.started_at is not None:
            at = job.started_at + WARN_AT * job.spec.time_limit_s
            self._warnings[job.id] = _Event(job, ("time_limit",), at)

    def _due(self, now: float) -> list[Delivery]:
        """Pending deliveries whose time has come and that no earlier one of the same job and
        URL holds back."""
        due: list[Delivery] = []
        with self._lock:
            blocked: set[tuple[int | None, str]] = set()
            for d in self._pending:
                key = (d.job_id, d.url) if d.job_id is not None else (None, d.id)
                if key in blocked:
                    continue
                blocked.add(key)
                if d.id not in self._in_flight and d.next_at <= now:
                    self._in_flight.add(d.id)
                    due.append(d)
        return due

    def _next_wait(self) -> float:
        with self._lock:
            waiting = [d.next_at for d in self._pending if d.id not in self._in_flight]
        waiting += [w.at for w in list(self._warnings.values())]
        if not waiting:
            return 5.0
        return max(0.01, min(5.0, min(waiting) - self._clock()))

    def _send(self, d: Delivery) -> None:
        try:
            try:
                secret = self._ensure_secret(d.signer)
                sent_at = self._clock()
                body = body_of(d, sent_at)
                result = self._poster.post(d.url, headers_of(d, secret, sent_at, body), body)
            except Exception as exc:  # the store, an adapter's bug: a failed try, not a
                result = PostResult(None, f"{type(exc).__name__}: {exc}")  # dead worker
            self._record(d, result)
        except Exception:
            log.exception("webhooks: delivery %s", d.id)
        finally:
            with self._lock:
                self._in_flight.discard(d.id)
            self._wake.set()

    def _record(self, d: Delivery, result: PostResult) -> None:
        now = self._clock()
        attempts = d.attempts + 1
        if result.ok:
            new = replace(d, state="delivered", attempts=attempts, last_status=result.status,
                          last_error="", updated_at=now)  # fmt: skip
        elif result.final or attempts >= self.tries:
            new = replace(d, state="failed", attempts=attempts, last_status=result.status,
                          last_error=result.error[:500], updated_at=now)  # fmt: skip
        else:
            new = replace(
                d, attempts=attempts, last_status=result.status, last_error=result.error[:500],
                next_at=now + retry_delay_s(attempts, self.retry_first_s), updated_at=now,
            )  # fmt: skip
        try:
            self._store.save_deliveries([new])
        except Exception:  # kept in memory; a restart may send it once more (receivers dedup)
            log.exception("webhooks: recording delivery %s failed", d.id)
        with self._lock:
            at = next((i for i, p in enumerate(self._pending) if p.id == d.id), None)
            if at is not None:
                if new.state == "pending":
                    self._pending[at] = new
                else:
                    del self._pending[at]
        if new.state == "failed":
            log.warning(
                "webhooks: %s of job %s to %s failed after %d tries: %s",
                d.event, d.job_id, d.host, attempts, new.last_error,
            )  # fmt: skip

    def _ensure_secret(self, signer: str) -> str:
        """The signer's secret, made (and stored) the first time a delivery needs it: the
        user learns it with `gpuyard notify secret --rotate`."""
        kind, _, name = signer.partition(":")
        with self._lock:
            entry = self._settings.get((kind, name))
            if entry is not None and entry.secret is not None:
                return entry.secret
            now = self._clock()
            base = entry or NotifySettings("team" if kind == "team" else "user", name)
            entry = replace(base, secret=new_secret(), secret_at=now, updated_at=now)
            self._store.save_notify_settings(entry)
            self._settings[(kind, name)] = entry
            assert entry.secret is not None
            return entry.secret

    def pending_count(self) -> int:
        with self._lock:
            return len(self._pending)


def _first_wanted(events: tuple[str, ...], target: Target) -> str | None:
    return next((e for e in events if e in target.events), None)


def new_secret() -> str:
    return "whsec_" + secrets.token_urlsafe(32)


def _new_id() -> str:
    return uuid.uuid4().hex
