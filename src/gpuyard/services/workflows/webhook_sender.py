"""The webhook sender (the server's `Background`): queued events to stored deliveries, POSTed.

The path of an event:
1. the journal's *in-order* observer (`NotifyService` in `notify.py`, under the journal's lock,
   in commit order) only asks whether the change is an event someone may want (a job naming
   webhooks, or any default set) and puts it on a bounded queue (`offer`): never a read, never
   a block. A full queue (10,000 events the sender has not taken) drops the event with a
   warning, counted;
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
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace

from gpuyard.domain.job import Job
from gpuyard.domain.states import JobState
from gpuyard.domain.webhooks import (
    Delivery,
    Target,
    body_of,
    headers_of,
    job_summary,
    retry_delay_s,
    targets_of,
)
from gpuyard.services.ports import PostResult, WebhookPoster
from gpuyard.services.stores import NotifyStore
from gpuyard.services.workflows.webhook_settings import SettingsCache

log = logging.getLogger("gpuyard.notify")

TRIES = 5
RETRY_FIRST_S = 40.0
QUEUE_SIZE = 10_000
WORKERS = 4
KEEP_PER_OWNER = 1_000
KEEP_S = 30 * 86400.0
PRUNE_EVERY_S = 3600.0
WARN_AT = 0.9  # the share of a job's time limit at which `time_limit` warns
MAX_LOG = 1_000  # the most deliveries one read of the log returns


@dataclass(frozen=True, slots=True)
class _Event:
    job: Job
    events: tuple[str, ...]
    at: float


class WebhookSender:
    """The queue of events, the pending deliveries and the threads that send them."""

    def __init__(
        self,
        store: NotifyStore,
        poster: WebhookPoster,
        cache: SettingsCache,
        *,
        clock: Callable[[], float] = time.time,
        retry_first_s: float = RETRY_FIRST_S,
        tries: int = TRIES,
        queue_size: int = QUEUE_SIZE,
        workers: int = WORKERS,
    ) -> None:
        self._store = store
        self._poster = poster
        self._cache = cache
        self._clock = clock
        self.retry_first_s = retry_first_s
        self.tries = tries
        self.workers = workers
        self._queue: queue.Queue[_Event] = queue.Queue(maxsize=queue_size)
        self._lock = threading.Lock()  # the pending list and those in flight
        self._pending: list[Delivery] = []  # oldest first
        self._in_flight: set[str] = set()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._work: queue.Queue[Delivery] = queue.Queue()  # due, for the workers
        self._workers: list[threading.Thread] = []
        self._last_prune = 0.0
        self._warnings: dict[int, _Event] = {}  # job id -> its time-limit warning (sender's)

    def offer(self, job: Job, events: tuple[str, ...], at: float) -> bool:
        """Queue a change's events for the sender thread, never blocking; False: the queue
        is full (the event is not taken)."""
        try:
            self._queue.put_nowait(_Event(job, events, at))
        except queue.Full:
            return False
        self._wake.set()
        return True

    def add_pending(self, made: Sequence[Delivery]) -> None:
        """Deliveries already stored (a test ping), sent when due."""
        with self._lock:
            self._pending.extend(made)
        self._wake.set()

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
                    self._cache.secret_of(signer)
                self._store.save_deliveries(made)  # stored before any is sent
            except Exception:  # the database: sent all the same, only a restart forgets them
                log.exception("webhooks: storing %d deliveries failed; sending them", len(made))
            with self._lock:
                self._pending.extend(made)

    def _deliveries_of(self, event: _Event) -> list[Delivery]:
        job = event.job
        user = self._cache.get("user", job.owner)
        team_name = self._cache.team_of(job.owner) if not job.spec.notify else None
        team = self._cache.get("team", team_name) if team_name else None
        out = []
        summary = job_summary(job)
        for target in targets_of(job, user, team):
            chosen = _first_wanted(event.events, target)
            if chosen is not None:
                out.append(
                    Delivery(
                        new_delivery_id(),
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
            if job.state is not JobState.RUNNING or not (
                job.spec.notify or self._cache.any_defaults
            ):
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
                secret = self._cache.secret_of(d.signer)
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

    def pending_count(self) -> int:
        with self._lock:
            return len(self._pending)


def _first_wanted(events: tuple[str, ...], target: Target) -> str | None:
    return next((e for e in events if e in target.events), None)


def new_delivery_id() -> str:
    return uuid.uuid4().hex
