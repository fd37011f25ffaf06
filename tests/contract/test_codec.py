"""The store codec is driven by the spec's fields: every JobSpec field survives Job -> row ->
Job, and a row written before a field existed reads back with the field's default.

The fields are discovered with `dataclasses.fields`, so a new JobSpec field fails here until
`stores.EVERY_SPEC_FIELD` sets it to something other than its default."""

from __future__ import annotations

import dataclasses
import json

import pytest

from gpuyard.adapters.store.codec import SPEC_COLUMNS, job_to_row, row_to_job
from gpuyard.domain.job import Job, JobSpec
from gpuyard.domain.states import JobState
from tests.contract.stores import EVERY_SPEC_FIELD, finished_job_with_every_field_set

SPEC_FIELDS = [f.name for f in dataclasses.fields(JobSpec)]


def _default_of(f: dataclasses.Field[object]) -> object:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING  # a required field: any value will do


@pytest.mark.parametrize("field", SPEC_FIELDS)
def test_the_fixture_sets_every_spec_field_off_its_default(field: str) -> None:
    assert field in EVERY_SPEC_FIELD, f"add JobSpec.{field} to stores.EVERY_SPEC_FIELD"
    (f,) = [f for f in dataclasses.fields(JobSpec) if f.name == field]
    assert EVERY_SPEC_FIELD[field] != _default_of(f), field


def test_every_job_field_is_set_in_the_fixture() -> None:
    full = finished_job_with_every_field_set()
    bare = Job(id=0, spec=full.spec, owner="", state=JobState.PENDING, submitted_at=0.0)
    unset = [f.name for f in dataclasses.fields(Job)
             if f.name != "spec" and getattr(full, f.name) == getattr(bare, f.name)]  # fmt: skip
    assert unset == [], "set these Job fields in stores.finished_job_with_every_field_set"


def test_job_to_row_to_job_keeps_every_field() -> None:
    job = finished_job_with_every_field_set()
    row = job_to_row(job)
    assert json.loads(json.dumps(row)) == row  # plain column values, nothing Python-only
    back = row_to_job(row)
    assert back == job
    for name in SPEC_FIELDS:
        assert getattr(back.spec, name) == EVERY_SPEC_FIELD[name], name
        assert type(getattr(back.spec, name)) is type(EVERY_SPEC_FIELD[name]), name


# Fields added after the first release have defaults; name and priority have their own columns.
OPTIONAL_IN_JSON = [
    f.name
    for f in dataclasses.fields(JobSpec)
    if _default_of(f) is not dataclasses.MISSING and f.name not in SPEC_COLUMNS
]


@pytest.mark.parametrize("field", OPTIONAL_IN_JSON)
def test_a_row_from_before_a_field_reads_back_with_its_default(field: str) -> None:
    row = job_to_row(finished_job_with_every_field_set())
    spec_json = json.loads(row["spec"])
    del spec_json[field]
    row["spec"] = json.dumps(spec_json)
    (f,) = [f for f in dataclasses.fields(JobSpec) if f.name == field]
    assert getattr(row_to_job(row).spec, field) == _default_of(f)


def test_a_spec_column_leaves_out_its_defaults_and_reads_back_whole() -> None:
    """A spec's fields at their defaults are not written (a restart decodes every kept spec),
    yet read back as those defaults."""
    job = finished_job_with_every_field_set()
    bare = dataclasses.replace(job, spec=JobSpec(argv=("python", "train.py"), workdir="/w",
                                                 name="bare"))  # fmt: skip
    row = job_to_row(bare)
    assert sorted(json.loads(row["spec"])) == ["argv", "workdir"]
    assert row_to_job(row) == bare
