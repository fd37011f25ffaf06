"""The gpuyard Python SDK and the CLI's transport: a small typed client over one HTTP request each.

The CLI is typed all day and must answer in ~150 ms: httpx costs ~170 ms and http.client
~25 ms to import, so the transport is `gpuyard._http`. One client serves the CLI and scripts.
Which server, which token and the server's proof are `gpuyard._connection`'s.

One module over 500 lines because it is the SDK: one small method per route of the API, each
a path and a body; what is not a route (the connection, HTTP itself) lives elsewhere.

    from gpuyard.client import Client
    with Client() as c:
        job = c.submit(["python", "train.py"], gpus=1, time_limit="2h")
        done = c.wait(job, timeout=3600)     # a Job; JobFailed unless it COMPLETED
        print(done.state, done.exit_code, done.node, done.gpus)
        print(c.submit_function(sum, [1, 2], gpus=0).result())   # 3, computed in a job
"""

from __future__ import annotations

import json
import os
import time

# `X as X`: the SDK's names made with the connection, imported by its users from here.
from gpuyard import _retry
from gpuyard._connection import Connection
from gpuyard._connection import ServerNotVerified as ServerNotVerified
from gpuyard._connection import ServerUnreachable as ServerUnreachable
from gpuyard._connection import find_token as find_token
from gpuyard._connection import login_token_path as login_token_path
from gpuyard._connection import split_url as split_url
from gpuyard.domain.errors import Conflict, GpuyardError, NotFound, Unavailable
from gpuyard.sdk.records import Job as Job
from gpuyard.sdk.records import JobFailed as JobFailed
from gpuyard.sdk.records import WaitTimeout as WaitTimeout
from gpuyard.sdk.records import job_of, jobs_of

# Named as before they moved: a traceback or a pickle says `gpuyard.client.ServerUnreachable`.
ServerUnreachable.__module__ = ServerNotVerified.__module__ = __name__

# `typing` only for the type checker: the CLI's start path does not import it (~3 ms).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Sequence
    from typing import Any, TypeAlias, TypeVar, overload

    from gpuyard._http import HttpResponse
    from gpuyard.sdk.functions import FunctionJob

    JobDict: TypeAlias = dict[str, Any]
    # What `wait` takes for a job: its id, its record, or a FunctionJob.
    JobRef: TypeAlias = int | dict[str, Any] | FunctionJob[Any]
    R = TypeVar("R")
else:
    JobDict = dict


# While a followed server is down (a restart), it is asked again this often.
_RECONNECT_POLL_S = 0.5
# How long a call that fails in a way safe to retry is tried again (`gpuyard._retry`: every
# read, the idempotent verbs, a submit with its Idempotency-Key, which the server answers
# with the job the first try made: never a second job); GPUYARD_CLIENT_RETRY_S, formerly
# GPUYARD_SUBMIT_RETRY_S (both still read); 0: no retry.
RETRY_S = SUBMIT_RETRY_S = _retry.WINDOW_S


class Client:
    """Talks to one gpuyard server; errors come back as the server's exception classes."""

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        timeout_s: float = 30,
        *,
        retry_s: float | None = None,
        submit_retry_s: float | None = None,
        on_waiting: Callable[[str], object] | None = None,
    ):
        """`retry_s` (`submit_retry_s`, its older name): how long a call safe to retry is
        tried again while the server does not answer or asks to wait (`gpuyard._retry`; None:
        GPUYARD_CLIENT_RETRY_S, else 30 s). `on_waiting(line)`: told once per outage that the client
        waits (None: the line goes to stderr)."""
        # Which server, with which token, and its proof first (`gpuyard._connection`).
        self._connection = Connection(url, token, timeout_s)
        if retry_s is None:
            retry_s = submit_retry_s
        self.retry_s = _retry.window_s() if retry_s is None else max(0.0, retry_s)
        self._on_waiting = on_waiting or _say_on_stderr
        self._waiting = False  # the waiting line was said, and no call has succeeded since

    @property
    def submit_retry_s(self) -> float:
        """`retry_s`'s name from when only submits were retried."""
        return self.retry_s

    @property
    def url(self) -> str:
        """The server's address: `unix:PATH` while its socket answers, else its URL."""
        return self._connection.url

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        """Nothing held between requests: each opens its own connection."""

    # -- API ------------------------------------------------------------------------------
    def submit(
        self,
        command: Sequence[str],
        *,
        idempotency_key: str | None = None,
        on_retry: Callable[[ServerUnreachable], object] | None = None,
        **fields: Any,
    ) -> Job:
        """Queue a job; `fields` are JobSubmitIn's (gpus, mem, time_limit, workdir, ...).

        Without `workdir` the job runs in this process's working directory, as with the CLI.
        Sent with an `Idempotency-Key` (`idempotency_key`, else a fresh uuid4) and sent again
        with it on a connection error (refused, reset, dropped before the answer, timed out)
        or a 503/429 with Retry-After for `retry_s` (30 s) after the first, so a flaky network
        or a restarting server never makes two jobs; an answer the server gave (a 4xx:
        refused) is never retried. `on_retry`: called before each retry's wait with the
        error. Raises ServerUnreachable once the time is up.
        """
        body = _submission(command, fields)
        headers = {"Idempotency-Key": idempotency_key or new_idempotency_key()}

        def waiting(error: GpuyardError, window: float) -> None:
            if on_retry is not None and isinstance(error, ServerUnreachable):
                on_retry(error)
            self._say_waiting(error, window, " (the same job, never a second one)")

        return job_of(self._call("POST", "/api/v1/jobs", body, headers, on_wait=waiting,
                                 gave_up=self._gave_up))  # fmt: skip

    def _gave_up(self, last: GpuyardError, maybe_sent: bool) -> GpuyardError:
        if not isinstance(last, ServerUnreachable):
            return last  # the server's own "not now", as it said it
        tried = f"tried for {self.retry_s:g} s"
        if maybe_sent:
            return ServerUnreachable(
                f"lost the gpuyard server at {self.url} during a submit and it did not answer "
                f"again ({tried}): the job may be queued; check `gpuyard queue` before "
                "submitting it again"
            )
        return ServerUnreachable(
            f"cannot reach gpuyard server at {self.url} ({tried}; nothing was queued): is "
            "`gpuyard server` running?"
        )

    def dry_run(self, command: Sequence[str], **fields: Any) -> JobDict:
        """Whether a job with these fields could run here and when it would start."""
        body = _submission(command, fields)
        result: JobDict = self._json("POST", "/api/v1/jobs/dry-run", body)
        return result

    def jobs(
        self,
        *,
        all: bool = False,
        limit: int | None = None,
        before_id: int | None = None,
        since: float | None = None,
        states: Sequence[str] = (),
        user: str | None = None,
        name: str | None = None,
    ) -> list[Job]:
        """Pending and running jobs; with `all`, a page of history too: the newest `limit`
        jobs (older than `before_id`), in id order. Filters: submitted at or after `since`
        (Unix time), in one of `states`, owned by `user`, named `name`."""
        query: list[tuple[str, Any]] = [("all", "true")] if all else []
        for key, value in (("limit", limit), ("before_id", before_id), ("since", since),
                           ("user", user), ("name", name)):  # fmt: skip
            if value is not None:
                query.append((key, value))
        query += [("state", state) for state in states]
        text = "&".join(f"{key}={_query_value(str(value))}" for key, value in query)
        path = "/api/v1/jobs" + (f"?{text}" if text else "")
        return jobs_of(self._json("GET", path))

    def job(self, job_id: int) -> Job:
        """The job's record now (NotFound: no such job, or another user's)."""
        return job_of(self._json("GET", f"/api/v1/jobs/{job_id}"))

    def cancel(self, job_id: int, signal: str | int | None = None) -> Job:
        """Cancel a job; `signal` (a name such as "USR1", or a number): what a running job's
        processes get instead of the job's own stop signal."""
        path = f"/api/v1/jobs/{job_id}/cancel"
        if signal is not None:
            from urllib.parse import urlencode

            path += "?" + urlencode({"signal": str(signal)})
        return self._verb(path, job_id, lambda job: job["state"] == "CANCELLED")

    def cancel_many(
        self, job_ids: list[int], signal: str | int | None = None, *, whole_arrays: bool = False
    ) -> dict[str, Any]:
        """Cancel many jobs in one request: {"cancelled": [ids], "stopping": [ids], "refused":
        [{"id", "code", "message"}]}; `whole_arrays`: an array's id cancels all its tasks."""
        body: dict[str, Any] = {"ids": job_ids, "whole_arrays": whole_arrays}
        if signal is not None:
            body["signal"] = str(signal)
        resent: list[bool] = []
        result: dict[str, Any] = self._call("POST", "/api/v1/jobs/cancel", body,
                                            on_wait=self._noting_resend(resent))  # fmt: skip
        if resent and result["refused"]:
            self._cancelled_by_a_lost_try(result)
        return result

    def _noting_resend(self, resent: list[bool]) -> Callable[[GpuyardError, float], None]:
        """An `on_wait` that notes (in `resent`) a try that may have reached the server."""

        def on_wait(error: GpuyardError, window: float) -> None:
            if getattr(error, "maybe_sent", False):
                resent.append(True)
            self._say_waiting(error, window)

        return on_wait

    def _cancelled_by_a_lost_try(self, result: dict[str, Any]) -> None:
        """A cancel sent again after its answer was lost finds the jobs the lost try cancelled
        "already ended": those that are CANCELLED now are counted as cancelled, not refused."""
        refused = []
        for item in result["refused"]:
            if item.get("code") == Conflict.code:
                try:
                    if self.job(int(item["id"]))["state"] == "CANCELLED":
                        result["cancelled"].append(item["id"])
                        continue
                except NotFound:
                    pass
            refused.append(item)
        result["refused"] = refused

    def array(self, array_id: int) -> list[Job]:
        """A job array's tasks (jobs), by task index; the array's id is its first task's."""
        return jobs_of(self._json("GET", f"/api/v1/arrays/{array_id}"))

    def cancel_array(self, array_id: int) -> list[Job]:
        """Cancel every pending and running task of the array (scancel A); its tasks after."""
        return jobs_of(self._json("POST", f"/api/v1/arrays/{array_id}/cancel"))

    def hold(self, job_id: int) -> Job:
        """Keep a pending job out of the queue until `release`."""
        return job_of(self._json("POST", f"/api/v1/jobs/{job_id}/hold"))

    def release(self, job_id: int) -> Job:
        """Let a held job back in the queue."""
        path = f"/api/v1/jobs/{job_id}/release"
        return self._verb(path, job_id, lambda j: j["state"] == "PENDING" and not j.get("held"))

    def requeue(self, job_id: int) -> Job:
        """Stop a running job and put it back in the queue."""
        return self._verb(f"/api/v1/jobs/{job_id}/requeue", job_id,
                          lambda job: job["state"] == "PENDING")  # fmt: skip

    def _verb(self, path: str, job_id: int, landed: Callable[[Job], bool]) -> Job:
        """A verb on one job; sent again after its answer was lost, the server may refuse it
        (409: already cancelled, not held, pending) because the lost try did it: the job is
        read, and if `landed` says it shows the verb done, that is the answer."""
        resent: list[bool] = []
        try:
            return job_of(self._call("POST", path, on_wait=self._noting_resend(resent)))
        except Conflict:
            if not resent:
                raise
            job = self.job(job_id)
            if not landed(job):
                raise
            return job

    def restart(self, job_id: int) -> Job:
        """Run a finished job again: the new job (its `restart_of` is `job_id`)."""
        return job_of(self._json("POST", f"/api/v1/jobs/{job_id}/restart"))

    def update(
        self,
        job_id: int,
        *,
        time_limit: str | None = None,
        priority: int | None = None,
        gpus: int | None = None,
    ) -> Job:
        """Change a pending job's time limit (`2h`, `1:30:00`), priority or GPUs."""
        body = {k: v for k, v in (("time_limit", time_limit), ("priority", priority),
                                  ("gpus", gpus)) if v is not None}  # fmt: skip
        return job_of(self._json("PATCH", f"/api/v1/jobs/{job_id}", body))

    def whoami(self) -> JobDict:
        """The account this client's token acts as (`user`, `role`)."""
        result: JobDict = self._json("GET", "/api/v1/whoami")
        return result

    def clean(self, older_than: str | None = None, user: str | None = None) -> JobDict:
        """Forget finished jobs (records, logs, folders) that ended more than `older_than`
        ago ("7d", "12h"; None: any): the caller's own, or an admin's for everyone (or `user`'s).
        Returns {"cleaned": N, "folders_kept": [ids whose folder could not be removed]}."""
        from urllib.parse import urlencode

        query = {k: v for k, v in (("older_than", older_than), ("user", user)) if v is not None}
        path = "/api/v1/jobs/clean" + (f"?{urlencode(query)}" if query else "")
        result: JobDict = self._json("POST", path)
        return result

    # -- tokens and accounts ---------------------------------------------------------------
    def create_token(self, scope: str = "submit", expires: str = "90d") -> JobDict:
        """A new token for yourself: {"token": the secret (shown this once), "id", "scope",
        "expires_at", ...}; `expires`: 90d, 12h, ... or "never"."""
        body = {"scope": scope, "expires": expires}
        result: JobDict = self._json("POST", "/api/v1/tokens", body)
        return result

    def tokens(self, all: bool = False) -> list[JobDict]:
        """Your tokens not revoked: id, user, scope, created_at, expires_at, last_used_at;
        `all`: every user's (admins only)."""
        result: list[JobDict] = self._json("GET", "/api/v1/tokens" + ("?all=true" if all else ""))
        return result

    def revoke_token(self, token_id: int) -> JobDict:
        result: JobDict = self._json("DELETE", f"/api/v1/tokens/{token_id}")
        return result

    def add_user(
        self, name: str, *, team: str | None = None, role: str = "user",
        unix_user: str | None = None,
    ) -> JobDict:  # fmt: skip
        """An admin adds an account (team: `default`; role: admin or user)."""
        body = {k: v for k, v in (("name", name), ("team", team), ("role", role),
                                  ("unix_user", unix_user)) if v is not None}  # fmt: skip
        result: JobDict = self._json("POST", "/api/v1/admin/users", body)
        return result

    def users(self) -> list[JobDict]:
        result: list[JobDict] = self._json("GET", "/api/v1/admin/users")
        return result

    def disable_user(self, name: str) -> JobDict:
        """An admin refuses all of `name`'s tokens from now on."""
        from urllib.parse import quote

        result: JobDict = self._json("POST", f"/api/v1/admin/users/{quote(name)}/disable")
        return result

    def enable_user(self, name: str) -> JobDict:
        """An admin accepts a disabled user's tokens again."""
        from urllib.parse import quote

        result: JobDict = self._json("POST", f"/api/v1/admin/users/{quote(name)}/enable")
        return result

    def add_team(self, name: str) -> JobDict:
        result: JobDict = self._json("POST", "/api/v1/admin/teams", {"name": name})
        return result

    def teams(self) -> list[JobDict]:
        result: list[JobDict] = self._json("GET", "/api/v1/admin/teams")
        return result

    def set_limits(self, kind: str, name: str, **limits: float | int | None) -> JobDict:
        """An admin sets some of a user's or team's limits (`kind` "user" or "team"):
        max_gpus, max_pending, max_gpu_hours, window_s, shares; None fields stay as they were."""
        from urllib.parse import quote

        body = {k: v for k, v in limits.items() if v is not None}
        path = f"/api/v1/admin/limits/{quote(kind)}/{quote(name)}"
        result: JobDict = self._json("PUT", path, body)
        return result

    def limits(self) -> list[JobDict]:
        """Every limit (admins); a user's own and their team's."""
        result: list[JobDict] = self._json("GET", "/api/v1/admin/limits")
        return result

    def clear_limits(self, kind: str, name: str) -> None:
        from urllib.parse import quote

        self._request("DELETE", f"/api/v1/admin/limits/{quote(kind)}/{quote(name)}").read()

    # -- webhooks (`gpuyard notify`) ----------------------------------------------------
    def notify_settings(self) -> list[JobDict]:
        """Your webhook defaults and your team's (admins: everyone's)."""
        result: list[JobDict] = self._json("GET", "/api/v1/notify")
        return result

    def set_notify(
        self, urls: Sequence[str], events: Sequence[str] = (), team: str | None = None
    ) -> JobDict:
        """Set your (or, as an admin, a team's) webhook URLs and events; the answer carries
        the signing secret when this made the first one (`secret`, shown once)."""
        body = {"urls": list(urls), "events": list(events)}
        result: JobDict = self._json("PUT", "/api/v1/notify" + _team_query(team), body)
        return result

    def clear_notify(self, team: str | None = None) -> None:
        self._request("DELETE", "/api/v1/notify" + _team_query(team)).read()

    def rotate_notify_secret(self, team: str | None = None) -> JobDict:
        """A new webhook signing secret (`secret`), shown once."""
        result: JobDict = self._json("POST", "/api/v1/notify/secret" + _team_query(team))
        return result

    def notify_deliveries(self, limit: int = 50) -> list[JobDict]:
        """Your webhook deliveries, newest first (the URL's host only)."""
        result: list[JobDict] = self._json("GET", f"/api/v1/notify/deliveries?limit={limit}")
        return result

    def notify_test(self, url: str | None = None) -> list[JobDict]:
        """Queue a `ping` to `url` (else to each of your webhook URLs); the deliveries made."""
        result: list[JobDict] = self._json("POST", "/api/v1/notify/test", {"url": url})
        return result

    def share(self) -> list[JobDict]:
        """Fair share per user (as `sshare`): shares, decayed usage, factor."""
        result: list[JobDict] = self._json("GET", "/api/v1/share")
        return result

    def usage(self, by: str = "user", since: float | None = None) -> list[JobDict]:
        """GPU-hours allocated and used, jobs by state, utilisation (as `sreport`)."""
        query = f"by={by}" + ("" if since is None else f"&since={since}")
        result: list[JobDict] = self._json("GET", f"/api/v1/usage?{query}")
        return result

    def gpus(self) -> list[JobDict]:
        result: list[JobDict] = self._json("GET", "/api/v1/gpus")
        return result

    def nodes(self) -> list[JobDict]:
        """The machines, as Slurm's `sinfo -N` shows nodes."""
        result: list[JobDict] = self._json("GET", "/api/v1/nodes")
        return result

    def node_doctor(self, name: str) -> JobDict:
        """`gpuyard doctor --node NAME` (admins): `{"node", "facts"}`, the machine's doctor
        facts gathered there (`gpuyard.doctor.wire.facts_from_json` reads them)."""
        path = f"/api/v1/nodes/{_query_value(name)}/doctor"
        result: JobDict = self._call("GET", path, timeout_s=_DOCTOR_TIMEOUT_S)
        return result

    def drain(self, gpu_index: int, reason: str = "", now: bool = False) -> JobDict:
        """Take a GPU out of service: its jobs finish there, or with `now` are requeued."""
        body = {"reason": reason, "now": now}
        result: JobDict = self._json("POST", f"/api/v1/gpus/{gpu_index}/drain", body)
        return result

    def resume(self, gpu_index: int) -> JobDict:
        result: JobDict = self._json("POST", f"/api/v1/gpus/{gpu_index}/resume")
        return result

    def info(self) -> JobDict:
        result: JobDict = self._json("GET", "/api/v1/info")
        return result

    # -- sweeps ------------------------------------------------------------------------------
    def submit_sweep(self, sweep: dict[str, Any], workdir: str | None = None) -> JobDict:
        """Run a sweep: `sweep` is its file's table (docs/cli.md "Sweeps"); its trials run in
        `workdir` (None: this process's working directory). The answer: the sweep (its id is
        its job array's) with its trials."""
        body = {"sweep": sweep, "workdir": workdir or os.getcwd()}
        result: JobDict = self._json("POST", "/api/v1/sweeps", body)
        return result

    def sweep(self, sweep_id: int) -> JobDict:
        """A sweep with its trials ranked by the metric (best first)."""
        result: JobDict = self._json("GET", f"/api/v1/sweeps/{sweep_id}")
        return result

    def sweeps(self, all: bool = False) -> list[JobDict]:
        """Your sweeps (an admin's with `all`: everyone's), without their trials."""
        result: list[JobDict] = self._json("GET", "/api/v1/sweeps" + ("?all=true" if all else ""))
        return result

    # -- charts (issue 14): None from a server that has no such route ------------------------
    def progress(self, job_id: int) -> JobDict | None:
        """The job's latest progress: step, total, fraction, rate_per_s, eta_s, metrics (the
        latest of each), updated_at, source; its fields are null before any report. None from
        an older server without the route (a job that does not exist is NotFound)."""
        return self._optional(f"/api/v1/jobs/{job_id}/progress")

    def series(self, job_id: int, names: Sequence[str], max_points: int = 500) -> JobDict | None:
        """The job's metric series `{job_id, series: {name: [[epoch_s, value], ...]}}` (the
        server downsamples each to `max_points`); None from a server without the route."""
        query = f"names={_query_value(','.join(names))}&max_points={int(max_points)}"
        return self._optional(f"/api/v1/jobs/{job_id}/series?{query}")

    def job_gpu_history(self, job_id: int, max_points: int = 600) -> JobDict | None:
        """The job's GPUs' telemetry over its runs: `{job_id, gpus: [{index, uuid,
        resolution_s, samples: [[epoch_s, util_pct, mem_used_mib, temp_c, power_w], ...]}]}`;
        None from a server without the route."""
        path = f"/api/v1/jobs/{job_id}/gpu-history?max_points={int(max_points)}"
        return self._optional(path)

    def _optional(self, path: str) -> JobDict | None:
        """GET a route newer servers have: None when the server says the route itself does
        not exist (its 404 names no route), so a newer CLI still works with an older server."""
        try:
            result: JobDict = self._json("GET", path)
        except NotFound as exc:
            if exc.message == NO_SUCH_ROUTE:
                return None
            raise
        return result

    def log(self, job_id: int, offset: int = 0, *, tail: int | None = None) -> bytes:
        """The job's output from `offset`, or its last `tail` lines (`log_chunks` streams it)."""
        return b"".join(self.log_chunks(job_id, offset, tail=tail))

    def log_chunks(
        self, job_id: int, offset: int = 0, *, tail: int | None = None
    ) -> Iterator[bytes]:
        """The job's output as it now is, in pieces as they arrive (constant memory)."""
        resp = self._request("GET", _log_path(job_id, offset, tail, follow=False))
        try:
            yield from resp.chunks()
        except OSError:
            raise self._lost() from None

    def _lost(self, submit: bool = False) -> ServerUnreachable:
        check = "check `gpuyard queue` (a submit may have been accepted)" if submit else "try again"
        return ServerUnreachable(
            f"lost the connection to the gpuyard server at {self.url} mid-answer; {check}"
        )

    def follow_log(
        self,
        job_id: int,
        offset: int = 0,
        *,
        tail: int | None = None,
        reconnect_s: float = 60.0,
        on_lost: Callable[[], object] | None = None,
    ) -> Iterator[bytes]:
        """Yield the job's output as it is written, until the job ends. A server that goes
        away (a restart) is waited for, up to `reconnect_s`, and followed again from the byte
        the output stopped at; `on_lost` is called once each time it goes away."""
        lost_since: float | None = None
        while True:
            try:
                resp = self._request("GET", _log_path(job_id, offset, tail, follow=True),
                                     timeout_s=None, retry=False)  # fmt: skip
                offset, tail, lost_since = int(resp.headers.get("x-log-start", offset)), None, None
                for chunk in resp.chunks():
                    offset += len(chunk)
                    yield chunk
                return
            except (OSError, ServerUnreachable, Unavailable):
                now = time.monotonic()
                if lost_since is None:
                    lost_since = now
                    if on_lost is not None:
                        on_lost()
                elif now - lost_since > reconnect_s:
                    raise ServerUnreachable(
                        f"lost the gpuyard server at {self.url} while following job {job_id}'s "
                        f"log and it was not back within {reconnect_s:g} s; once it is, "
                        f"`gpuyard logs -f {job_id}` follows it again"
                    ) from None
                time.sleep(_RECONNECT_POLL_S)

    if TYPE_CHECKING:

        @overload
        def wait(
            self, jobs: JobRef, poll_s: float = 0.5, *, timeout: float | None = None,
            raise_on_failure: bool = True,
        ) -> Job: ...  # fmt: skip

        @overload
        def wait(
            self, jobs: Sequence[JobRef], poll_s: float = 0.5, *, timeout: float | None = None,
            raise_on_failure: bool = True,
        ) -> list[Job]: ...  # fmt: skip

    def wait(
        self,
        jobs: JobRef | Sequence[JobRef],
        poll_s: float = 0.5,
        *,
        timeout: float | None = None,
        raise_on_failure: bool = True,
    ) -> Job | list[Job]:
        """Block until the job (an id, a record, a FunctionJob) or every job of a list has
        ended; its final record, or theirs in the order given.

        `raise_on_failure` (default True, as `sbatch --wait` and `gpuyard wait` exit non-zero):
        once all have ended, raise JobFailed for the first that did not COMPLETE (FAILED,
        CANCELLED, TIMEOUT, OUT_OF_MEMORY, NODE_FAIL), carrying it and every record; False:
        return the records whatever their end. `timeout` (seconds; None: no limit): raise
        WaitTimeout (a TimeoutError) naming those still pending or running; the jobs run on.
        """
        single = isinstance(jobs, int | dict) or hasattr(jobs, "job_id")
        refs = [jobs] if single else jobs
        job_ids = [_job_id(ref) for ref in refs]  # type: ignore[arg-type, union-attr]
        deadline = None if timeout is None else time.monotonic() + timeout
        done: dict[int, Job] = {}
        while True:
            latest: dict[int, Job] = {}
            for job_id in job_ids:
                if job_id not in done:
                    job = self.job(job_id)
                    if job["state"] in _terminal_states():
                        done[job_id] = job
                    else:
                        latest[job_id] = job
            if len(done) == len(set(job_ids)):
                break
            if deadline is not None and time.monotonic() + poll_s > deadline:
                if time.monotonic() < deadline:
                    time.sleep(max(0.0, deadline - time.monotonic()))
                    continue
                raise WaitTimeout(list(latest.values()), timeout or 0.0)
            time.sleep(poll_s)
        ended = [done[j] for j in job_ids]
        if raise_on_failure:
            for job in ended:
                if not job.ok:
                    raise JobFailed(job, ended)
        return ended[0] if single else ended

    # -- Python functions as jobs (gpuyard.sdk.functions) ----------------------------------
    def submit_function(
        self, function: Callable[..., R], /, *args: Any, folder: str | None = None,
        **resources: Any,
    ) -> FunctionJob[R]:  # fmt: skip
        """Run `function(*args)` as a job (submitit's `executor.submit`); `resources` are
        `submit`'s fields (gpus, mem, time_limit, name, ...). Keyword arguments for the
        function: `functools.partial(function, lr=0.1)`. The answer's `result()` waits and
        gives the return value, or raises the function's exception (its traceback from the
        job as the `__cause__`). `folder`: where the call and its result are kept
        (~/.cache/gpuyard/functions), which the job's machine must see."""
        from gpuyard.sdk.functions import FunctionJob, job_name, prepare

        here, argv, env = prepare(function, [(args, {})], folder, array=False)
        fields = {"name": job_name(function), **resources}
        fields["env"] = {**env, **(resources.get("env") or {})}
        job = self.submit(argv, **fields)
        return FunctionJob(self, job, here, None)

    def map_array(
        self, function: Callable[..., R], /, *iterables: Iterable[Any],
        max_running: int | None = None, folder: str | None = None, **resources: Any,
    ) -> list[FunctionJob[R]]:  # fmt: skip
        """Run `function` on each item (several iterables: zipped, as `map`) as one job array
        (submitit's `map_array`): one handle per item, in order, each with its `result()`.
        `max_running`: at most this many tasks at once (sbatch's `--array=0-N%M`)."""
        from gpuyard.sdk.functions import FunctionJob, calls_of, job_name, prepare

        calls = calls_of(iterables)
        if not calls:
            return []
        here, argv, env = prepare(function, calls, folder, array=True)
        spec = f"0-{len(calls) - 1}" + ("" if max_running is None else f"%{int(max_running)}")
        fields = {"name": job_name(function), **resources, "array": spec}
        fields["env"] = {**env, **(resources.get("env") or {})}
        first = self.submit(argv, **fields)
        tasks = {t.array_task_id: t for t in self.array(first.array_job_id or first.id)}
        return [FunctionJob(self, tasks[i], here, i) for i in range(len(calls))]

    # -- transport ------------------------------------------------------------------------
    def _json(
        self, method: str, path: str, body: Any = None, extra: dict[str, str] | None = None
    ) -> Any:
        """The answer's JSON, the call sent again while that is safe (`gpuyard._retry`)."""
        return self._call(method, path, body, extra)

    def _call(
        self,
        method: str,
        path: str,
        body: Any = None,
        extra: dict[str, str] | None = None,
        *,
        timeout_s: float | None = -1.0,
        on_wait: Callable[[GpuyardError, float], object] | None = None,
        gave_up: Callable[[GpuyardError, bool], GpuyardError] | None = None,
    ) -> Any:
        """One request and its whole answer read, as one attempt: an answer lost mid-body is
        retried as a connection error would be."""
        headers, payload = _headers_and_payload(body, extra)

        def attempt() -> Any:
            resp = self._connection.send(method, path, dict(headers), payload, timeout_s)
            try:
                raw = resp.read()
            except OSError:
                lost = self._lost(submit=method == "POST" and path == "/api/v1/jobs")
                raise lost from None
            return json.loads(raw)

        return self._retrying(attempt, method, path, headers, on_wait, gave_up)

    def _request(
        self,
        method: str,
        path: str,
        body: Any = None,
        timeout_s: float | None = -1.0,
        extra: dict[str, str] | None = None,
        *,
        retry: bool = True,
    ) -> HttpResponse:
        """The response before its body is read (a stream); its sending retried while that is
        safe, unless `retry` is False (a follower reconnects on its own)."""
        headers, payload = _headers_and_payload(body, extra)

        def attempt() -> HttpResponse:
            return self._connection.send(method, path, dict(headers), payload, timeout_s)

        if not retry:
            return attempt()
        return self._retrying(attempt, method, path, headers)

    def _retrying(
        self,
        attempt: Callable[[], R],
        method: str,
        path: str,
        headers: dict[str, str],
        on_wait: Callable[[GpuyardError, float], object] | None = None,
        gave_up: Callable[[GpuyardError, bool], GpuyardError] | None = None,
    ) -> R:
        try:
            return _retry.with_retries(
                attempt, resend=_retry.may_resend(method, path, headers), window=self.retry_s,
                on_wait=on_wait or self._say_waiting, gave_up=gave_up or self._gave_up_waiting,
            )  # fmt: skip
        finally:
            self._waiting = False  # answered, or given up: a later outage is said again

    def _say_waiting(self, error: GpuyardError, window: float, what: str = "") -> None:
        """The one line, once per outage, that this client waits (not a silent hang)."""
        if self._waiting:
            return
        self._waiting = True
        if isinstance(error, ServerUnreachable):
            why = f"the server at {self.url} is not answering (restarting?)"
        else:
            why = f"the server at {self.url} asks to wait ({error.message})"
        self._on_waiting(f"gpuyard: {why}; trying again for up to {window:g} s{what}")

    def _gave_up_waiting(self, last: GpuyardError, maybe_sent: bool) -> GpuyardError:
        """What a call other than a submit raises once its retries are spent."""
        if not isinstance(last, ServerUnreachable):
            return last
        error = ServerUnreachable(
            f"cannot reach gpuyard server at {self.url} (tried for {self.retry_s:g} s): is "
            "`gpuyard server` running?"
        )
        error.maybe_sent = maybe_sent
        return error


def _headers_and_payload(
    body: Any, extra: dict[str, str] | None
) -> tuple[dict[str, str], bytes | None]:
    headers = {"Accept": "application/json", **(extra or {})}
    payload = None
    if body is not None:
        payload = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    return headers, payload


def _say_on_stderr(line: str) -> None:
    import sys

    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def new_idempotency_key() -> str:
    """A fresh random uuid4 in its usual form, without `uuid` (~15 ms on the CLI's path)."""
    raw = bytearray(os.urandom(16))
    raw[6] = (raw[6] & 0x0F) | 0x40  # version 4
    raw[8] = (raw[8] & 0x3F) | 0x80  # RFC 4122 variant
    h = raw.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


# A machine's doctor may take the server's whole 60 s wait for its agent, and more.
_DOCTOR_TIMEOUT_S = 90.0
# What the server's 404 says when the path is no route at all (api/errors.py), not a job.
NO_SUCH_ROUTE = "no such API route"


def _team_query(team: str | None) -> str:
    return "" if team is None else f"?team={_query_value(team)}"


def _query_value(text: str) -> str:
    """Percent-encoded for a query string, without `urllib.parse` (~3 ms on the CLI's path)."""
    safe = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~,"
    return "".join(c if c in safe else "".join(f"%{b:02X}" for b in c.encode()) for c in text)


def _log_path(job_id: int, offset: int, tail: int | None, *, follow: bool) -> str:
    path = f"/api/v1/jobs/{job_id}/log?offset={offset}"
    if tail is not None:
        path += f"&tail={tail}"
    return path + ("&follow=true" if follow else "")


def _job_id(ref: JobRef) -> int:
    """A job's id from an id, a record (`{"id": ...}`) or a handle with `job_id`."""
    if isinstance(ref, int):
        return ref
    if isinstance(ref, dict):
        return int(ref["id"])
    return int(ref.job_id)


def _terminal_states() -> frozenset[str]:
    from gpuyard.domain.states import TERMINAL_STATES

    return frozenset(state.value for state in TERMINAL_STATES)


def _submission(command: Sequence[str], fields: dict[str, Any]) -> dict[str, Any]:
    """The request body: None dropped; the client's working directory unless one is given
    (the server decides the rest: domain/spec_rules.py)."""
    body = {"command": list(command), **{k: v for k, v in fields.items() if v is not None}}
    if "workdir" not in body:
        try:
            body["workdir"] = os.getcwd()
        except OSError:  # removed under us: let the server choose
            pass
    return body
