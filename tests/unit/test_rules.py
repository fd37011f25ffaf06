"""The authorisation table (services/access/rules.py) against every kind of credential: an
admin with admin, submit and read scope, the owner with submit and read, another user."""

from __future__ import annotations

import pytest

from gpuyard.api.convert import job_to_wire
from gpuyard.domain.errors import Forbidden, NotFound
from gpuyard.domain.job import Job, JobSpec
from gpuyard.domain.principal import Principal
from gpuyard.domain.states import JobState
from gpuyard.domain.webhooks import NotifySettings
from gpuyard.services.access import rules

ADMIN = Principal("root", "admin", "default", "admin")
ADMIN_SUBMIT = Principal("root", "admin", "default", "submit")
ADMIN_READ = Principal("root", "admin", "default", "read")
ADA = Principal("ada", "user", "vision", "submit")
ADA_READ = Principal("ada", "user", "vision", "read")
BOB = Principal("bob", "user", "vision", "submit")
EVERYONE = (ADMIN, ADMIN_SUBMIT, ADMIN_READ, ADA, ADA_READ, BOB)


def _rule_table(rule: object) -> dict[Principal, object]:
    return {actor: rule(actor, "ada") for actor in EVERYONE}  # type: ignore[operator]


def test_only_an_admin_scope_admin_is_an_admin() -> None:
    assert [rules.is_admin(a) for a in EVERYONE] == [True, False, False, False, False, False]
    assert [rules.sees_everyone(a) for a in EVERYONE] == [True, False, False, False, False, False]
    assert [rules.report_owner(a) for a in EVERYONE] == [None, "root", "root", "ada", "ada", "bob"]


def test_a_resource_is_its_owners_and_the_admins() -> None:
    assert _rule_table(rules.may_see) == {
        ADMIN: True, ADMIN_SUBMIT: False, ADMIN_READ: False, ADA: True, ADA_READ: True,
        BOB: False,
    }  # fmt: skip
    assert _rule_table(rules.may_change) == {
        ADMIN: True, ADMIN_SUBMIT: False, ADMIN_READ: False, ADA: True, ADA_READ: False,
        BOB: False,
    }  # fmt: skip
    assert [rules.owns(a, "ada") for a in EVERYONE] == [False, False, False, True, True, False]
    assert [rules.may_write(a) for a in EVERYONE] == [True, True, False, True, False, True]


def test_another_users_resource_does_not_exist_for_them() -> None:
    rules.require_visible(ADA, "ada", "job 7 not found")
    rules.require_visible(ADMIN, "ada", "job 7 not found")
    for actor in (BOB, ADMIN_SUBMIT, ADMIN_READ):
        with pytest.raises(NotFound, match=r"^job 7 not found$"):
            rules.require_visible(actor, "ada", "job 7 not found")


def test_admin_only_use_cases_share_one_message() -> None:
    rules.require_admin(ADMIN, "add a user")
    for actor in (ADMIN_SUBMIT, ADMIN_READ, ADA, ADA_READ, BOB):
        with pytest.raises(Forbidden) as refused:
            rules.require_admin(actor, "add a user")
        assert refused.value.message == (
            "only an admin may add a user; ask one (`gpuyard admin` needs that role)"
        )


def test_admin_tokens_are_made_only_by_admins() -> None:
    assert [rules.may_make_token(a, "admin") for a in EVERYONE] == [
        True, False, False, False, False, False,
    ]  # fmt: skip
    assert all(rules.may_make_token(a, s) for a in EVERYONE for s in ("read", "submit"))


def test_a_settings_row_is_the_users_own_their_teams_or_an_admins() -> None:
    rows = [("user", "ada"), ("team", "vision"), ("user", "bob"), ("team", "robots")]
    seen = {a: [r for r in rows if rules.may_see_entry(a, *r, "vision")] for a in (ADMIN, ADA)}
    assert seen == {ADMIN: rows, ADA: [("user", "ada"), ("team", "vision")]}
    assert not rules.may_see_entry(ADA, "team", "vision", None)  # no team: none of a team's


def _job(owner: str) -> Job:
    spec = JobSpec(argv=("python", "train.py", "--key=s3cr3t"), name="train", workdir="/home/x")
    return Job(id=7, spec=spec, owner=owner, state=JobState.PENDING, submitted_at=0.0)


def test_another_users_job_shows_neither_command_nor_workdir() -> None:
    job = _job("ada")
    for actor in (ADMIN, ADA, ADA_READ):
        assert rules.redact_job(actor, job) is job
    for actor in (BOB, ADMIN_SUBMIT):
        out = job_to_wire(rules.redact_job(actor, job), "", "")
        assert (out.command, out.workdir) == ([], "")
        assert (out.id, out.owner, out.name, out.state) == (7, "ada", "train", "PENDING")
    assert job.spec.argv[0] == "python"  # the job itself is untouched


def test_a_teams_webhooks_show_only_their_host_to_a_user() -> None:
    team = NotifySettings("team", "vision", ("https://u:p@hooks.example.org/T0/s3cr3t",), ("end",),
                          "secret")  # fmt: skip
    mine = NotifySettings("user", "ada", ("https://hooks.example.org/mine?key=1",))
    assert rules.redact_notify(ADMIN, team) is team
    assert rules.redact_notify(ADA, mine) is mine
    for actor in (ADA, ADMIN_SUBMIT):
        shown = rules.redact_notify(actor, team)
        assert shown.urls == ("hooks.example.org",)
        assert (shown.events, shown.secret) == (("end",), "secret")  # `secret_set` still true


def test_every_caller_kind_says_what_it_means_and_what_decides_it() -> None:
    assert set(rules.WHO) == {"public", "reader", "metrics", "submitter", "admin", "owner"}
    for name, who in rules.WHO.items():
        assert who.meaning, name
        assert (who.decided_by is None) == (who.where == rules.FRONT_DOOR), name
