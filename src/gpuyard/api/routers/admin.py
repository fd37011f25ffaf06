"""What only an admin may do: take GPUs out of service and put them back; add teams and
users, list and disable users (`services/access/accounts.py` decides; 403 for anyone else)."""

from __future__ import annotations

from fastapi import APIRouter

from gpuyard.api.deps import Accounts, Actor, Gpus
from gpuyard.domain.accounts import Account
from gpuyard.schemas.accounts_v1 import TeamIn, TeamOut, UserIn, UserOut
from gpuyard.schemas.v1 import DrainIn, DrainOut

router = APIRouter(prefix="/api/v1/gpus", tags=["admin"])
accounts_router = APIRouter(prefix="/api/v1/admin", tags=["admin"])


@router.post("/{index}/drain")
def drain_gpu(index: int, body: DrainIn, gpus: Gpus, actor: Actor) -> DrainOut:
    """Take a GPU out of service: no new job goes there; the jobs running on it finish, or
    with `now` are stopped and requeued."""
    jobs = [j.id for j in gpus.drain(index, body.reason, actor, now=body.now)]
    if body.now:
        return DrainOut(gpu=index, drained=True, failed_jobs=[], requeued_jobs=jobs)
    return DrainOut(gpu=index, drained=True, failed_jobs=[], running_jobs=jobs)


@router.post("/{index}/resume")
def resume_gpu(index: int, gpus: Gpus, actor: Actor) -> DrainOut:
    """Put a drained GPU back in service."""
    gpus.resume(index, actor)
    return DrainOut(gpu=index, drained=False, failed_jobs=[])


def _user_out(account: Account) -> UserOut:
    return UserOut(
        name=account.name, role=account.role, team=account.team, unix_user=account.unix_user,
        disabled=account.disabled, created_at=account.created_at,
    )  # fmt: skip


@accounts_router.post("/users", status_code=201)
def add_user(body: UserIn, accounts: Accounts, actor: Actor) -> UserOut:
    """A new account (team: `default`); its user makes tokens with `gpuyard token create`."""
    account = accounts.add_user(
        actor, body.name, team=body.team, role=body.role, unix_user=body.unix_user
    )
    return _user_out(account)


@accounts_router.get("/users")
def list_users(accounts: Accounts, actor: Actor) -> list[UserOut]:
    return [_user_out(a) for a in accounts.users(actor)]


@accounts_router.post("/users/{name}/disable")
def disable_user(name: str, accounts: Accounts, actor: Actor) -> UserOut:
    """Refuse all of the user's tokens from now on; their jobs and history stay."""
    return _user_out(accounts.disable_user(actor, name))


@accounts_router.post("/users/{name}/enable")
def enable_user(name: str, accounts: Accounts, actor: Actor) -> UserOut:
    """Accept a disabled user's tokens again (those not revoked or expired meanwhile)."""
    return _user_out(accounts.enable_user(actor, name))


@accounts_router.post("/teams", status_code=201)
def add_team(body: TeamIn, accounts: Accounts, actor: Actor) -> TeamOut:
    team = accounts.add_team(actor, body.name)
    return TeamOut(name=team.name, created_at=team.created_at)


@accounts_router.get("/teams")
def list_teams(accounts: Accounts, actor: Actor) -> list[TeamOut]:
    return [TeamOut(name=t.name, created_at=t.created_at) for t in accounts.teams(actor)]
