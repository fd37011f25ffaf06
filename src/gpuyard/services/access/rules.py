"""The one authorisation table: who may see, change and administer what, each a small pure
function of (principal, object). Every service asks these; no route decides.

A read-scope credential is refused any change at the front door (`api/front_door.py`), the
only way in, so the rules here decide by role and ownership: `may_change` still asks the
scope, for a caller that reaches a service some other way."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from gpuyard.domain.errors import Forbidden, NotFound
from gpuyard.domain.job import Job
from gpuyard.domain.principal import Principal
from gpuyard.domain.spec_rules import default_name
from gpuyard.domain.webhooks import NotifySettings, url_host


def is_admin(actor: Principal) -> bool:
    """An admin with an admin-scope credential (an admin's read or submit token is a user's)."""
    return actor.is_admin


def may_write(actor: Principal) -> bool:
    """Whether the credential may change anything at all (a read token only reads)."""
    return actor.may_change


def owns(actor: Principal, owner: str) -> bool:
    """Whether `owner` (of a job, sweep, token, settings row) is the actor themself."""
    return owner == actor.user


def may_see(actor: Principal, owner: str) -> bool:
    """A resource's details (a job's log, environment, command; a sweep; a token) are its
    owner's and the admins'."""
    return is_admin(actor) or owns(actor, owner)


def may_change(actor: Principal, owner: str) -> bool:
    """The owner or an admin, with a credential that may change things."""
    return may_write(actor) and may_see(actor, owner)


def sees_everyone(actor: Principal) -> bool:
    """Whether a listing or report shows every user's rows (admins), not the actor's own."""
    return is_admin(actor)


def report_owner(actor: Principal) -> str | None:
    """Whose rows a report reads: None (everyone's) for an admin, else the actor's own."""
    return None if sees_everyone(actor) else actor.user


def may_see_entry(actor: Principal, kind: str, name: str, team: str | None) -> bool:
    """An account's settings row (limits, webhook defaults), `kind` user or team: the
    admins', the user's own and their `team`'s."""
    return sees_everyone(actor) or (kind, name) in (("user", actor.user), ("team", team))


def may_make_token(actor: Principal, scope: str) -> bool:
    """A token never allows more than the credential that makes it: admin scope is an
    admin's (with an admin-scope credential)."""
    return scope != "admin" or is_admin(actor)


def require_visible(actor: Principal, owner: str, missing: str) -> None:
    """NotFound(`missing`) unless the actor may see `owner`'s resource: another user's job
    does not exist for them, in the same words as one that does not exist."""
    if not may_see(actor, owner):
        raise NotFound(missing)


def require_admin(actor: Principal, what: str) -> None:
    """Forbidden, in one wording for every admin-only use case, unless the actor is an admin."""
    if not is_admin(actor):
        raise Forbidden(f"only an admin may {what}; ask one (`gpuyard admin` needs that role)")


# Who the metrics token is (`api/front_door.py` makes it the principal of that token alone): it
# reaches GET /metrics only.
SCRAPER = Principal("metrics", role="user")
SCRAPE_REFUSED = (
    "/metrics is for the server's scraper: scrape with the metrics token (STATE_DIR/"
    "metrics-token) or an admin's; a user sees their own jobs with gpuyard top, show and the "
    "dashboard"
)


def require_scraper(actor: Principal) -> None:
    """Forbidden unless the actor is the metrics token or an admin (any scope: the series are
    read only). /metrics labels every user's jobs with their id, owner and name, which another
    user's queue rows hide; a plain account is refused rather than given a thinner page, since
    Prometheus expects one scrape credential that sees the whole target (one URL, one set of
    series), not answers that change with the caller. A user's own figures are in `gpuyard
    top`/`show`, the dashboard and GET /api/v1/jobs/{id}/progress."""
    if actor is not SCRAPER and actor.role != "admin":
        raise Forbidden(SCRAPE_REFUSED)


def redact_job(actor: Principal, job: Job) -> Job:
    """A job as the actor may see it in a listing: everyone sees who, what size, which state
    and why (as `squeue`: the reason's code); the command, working directory, output paths,
    interpreter, a name made from the command and a reason's detail (a launch failure quotes
    argv and the workdir) are the owner's and the admins' (its log and GPU stats too: the
    reader asks `may_see` for those)."""
    if may_see(actor, job.owner):
        return job
    spec = replace(job.spec, argv=(), workdir="", name=public_name(job), output_path=None,
                   error_path=None, python=None, venv=None)  # fmt: skip
    attempts = tuple(replace(a, reason=reason_code(a.reason)) for a in job.attempts)
    return replace(job, spec=spec, reason=reason_code(job.reason), attempts=attempts)


# What another user sees of a job named after its command (`python`, `train.sh`).
HIDDEN_NAME = "job"


def public_name(job: Job) -> str:
    """A job's name as everyone may see it (the queue, the events): the name its owner gave,
    never one made from its command."""
    spec = job.spec
    return HIDDEN_NAME if spec.argv and spec.name == default_name(spec.argv) else spec.name


def reason_code(reason: str) -> str:
    """A reason without its detail (`LaunchFailed: cannot run /home/alice/x` -> `LaunchFailed`),
    as another user's job shows it."""
    return reason.split(":", 1)[0].strip()


def public_reason(actor: Principal, owner: str, reason: str) -> str:
    """A job's reason as the actor may see it: whole for its owner and the admins."""
    return reason if may_see(actor, owner) else reason_code(reason)


def redact_notify(actor: Principal, settings: NotifySettings) -> NotifySettings:
    """Webhook settings as the actor may see them: a team's URLs only by their host unless the
    actor is an admin (a URL may carry a secret path or query); a user sees only their own."""
    if settings.kind != "team" or is_admin(actor):
        return settings
    return replace(settings, urls=tuple(url_host(u) for u in settings.urls))


@dataclass(frozen=True, slots=True)
class Caller:
    """One kind of caller the authorisation matrix (tests/api) names, and what decides it."""

    meaning: str
    decided_by: Callable[..., object] | None  # the rule here; None: the front door alone
    where: str = "services/access/rules.py"


FRONT_DOOR = "api/front_door.py"
# The caller kinds of the matrix test's `Rule.who`: each row there names one of these.
WHO: dict[str, Caller] = {
    "public": Caller("anyone, with no credential (health, the API's own documents)", None,
                     FRONT_DOOR),
    "metrics": Caller("the metrics token (GET /metrics only) and admins", require_scraper),
    "reader": Caller("any account with any scope; what it reads is its own or redacted",
                     may_see),
    "submitter": Caller("an account's submit or admin scope (a read token only reads)",
                        may_write),
    "admin": Caller("an admin with an admin-scope credential", require_admin),
    "owner": Caller("the resource's owner and the admins; anyone else: not found",
                    require_visible),
}  # fmt: skip
