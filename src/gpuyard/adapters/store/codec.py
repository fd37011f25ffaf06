"""Conversion between domain Jobs and database rows, driven by the dataclasses' own fields.

Every `Job` field is a column of the same name; the `JobSpec` is one JSON column, except the
spec fields that also have their own column (`name`, `priority`: filtered and indexed).
Values are converted by their declared type (tuples of pairs, enums, optionals), so a new
JobSpec field needs no edit here, and a row written before a field existed reads back with
that field's default.
"""

from __future__ import annotations

import dataclasses
import json
import types
from collections.abc import Callable, Mapping
from enum import Enum
from typing import Any, Union, get_args, get_origin, get_type_hints

from gpuyard.domain.job import Job, JobSpec

Decode = Callable[[Any], Any]

# JobSpec fields stored in their own column rather than in the spec's JSON.
SPEC_COLUMNS = ("name", "priority")


def _identity(value: Any) -> Any:
    return value


def decoder(tp: Any) -> Decode:
    """A function turning the JSON form of a value back into a value of type `tp`."""
    origin, args = get_origin(tp), get_args(tp)
    if origin in (Union, types.UnionType):
        options = [a for a in args if a is not type(None)]
        inner = decoder(options[0]) if len(options) == 1 else _identity
        return lambda v: None if v is None else inner(v)
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            item = decoder(args[0])
            return lambda v: tuple(item(x) for x in v)
        items = [decoder(a) for a in args]
        return lambda v: tuple(d(x) for d, x in zip(items, v, strict=True))
    if isinstance(tp, type) and issubclass(tp, Enum):
        return tp
    if tp is float:
        return float  # JSON writes 2.0 as 2.0, but a hand-written row may hold 2
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _dataclass_decoder(tp)
    return _identity


def encode(value: Any) -> Any:
    """The JSON form of a value: tuples become lists, enums their value, dataclasses dicts."""
    if isinstance(value, tuple | list):
        return [encode(v) for v in value]
    if isinstance(value, Enum):
        return value.value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: encode(getattr(value, f.name)) for f in dataclasses.fields(value)}
    return value


def _constant(value: Any) -> Callable[[], Any]:
    return lambda: value


def _defaults(cls: type) -> dict[str, Callable[[], Any]]:
    """Field name -> a maker of its default, for fields that have one."""
    made: dict[str, Callable[[], Any]] = {}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            made[f.name] = _constant(f.default)
        elif f.default_factory is not dataclasses.MISSING:
            made[f.name] = f.default_factory
    return made


def _dataclass_decoder(cls: type) -> Decode:
    hints = get_type_hints(cls)
    fields = {f.name: decoder(hints[f.name]) for f in dataclasses.fields(cls)}
    defaults = _defaults(cls)

    def decode(data: dict[str, Any]) -> Any:
        values = {}
        for name, dec in fields.items():
            if name in data:
                values[name] = dec(data[name])
            elif name in defaults:
                values[name] = defaults[name]()
        return cls(**values)

    return decode


_SPEC_HINTS = get_type_hints(JobSpec)
_SPEC_JSON_FIELDS = tuple(f.name for f in dataclasses.fields(JobSpec) if f.name not in SPEC_COLUMNS)
_SPEC_DECODE = _dataclass_decoder(JobSpec)

_JOB_HINTS = get_type_hints(Job)
# Job fields held as JSON text in their column (tuples: `gpus`).
_JOB_JSON_FIELDS = frozenset(
    f.name for f in dataclasses.fields(Job) if get_origin(_JOB_HINTS[f.name]) is tuple
)
_JOB_DECODE = {
    f.name: decoder(_JOB_HINTS[f.name]) for f in dataclasses.fields(Job) if f.name != "spec"
}
_JOB_DEFAULTS = _defaults(Job)


def spec_to_json(spec: JobSpec) -> str:
    """The spec's JSON column: every field but those with their own column."""
    return json.dumps({name: encode(getattr(spec, name)) for name in _SPEC_JSON_FIELDS})


def spec_from_json(text: str, columns: dict[str, Any]) -> JobSpec:
    """The spec from its JSON column plus its own columns; a missing field takes its default."""
    data = json.loads(text)
    data.update(columns)
    spec: JobSpec = _SPEC_DECODE(data)
    return spec


def job_to_row(job: Job) -> dict[str, Any]:
    row: dict[str, Any] = {}
    for f in dataclasses.fields(Job):
        value = getattr(job, f.name)
        if f.name == "spec":
            row["spec"] = spec_to_json(value)
        elif f.name in _JOB_JSON_FIELDS:
            row[f.name] = json.dumps(encode(value))
        else:
            row[f.name] = encode(value)
    for name in SPEC_COLUMNS:
        row[name] = encode(getattr(job.spec, name))
    return row


def row_to_job(row: Any) -> Job:
    """A Job from a row: a SQLAlchemy Row, or a mapping of column names (`job_to_row`'s)."""
    mapping: Mapping[str, Any] = row._mapping if hasattr(row, "_mapping") else row
    spec = spec_from_json(mapping["spec"], {name: mapping[name] for name in SPEC_COLUMNS})
    values: dict[str, Any] = {"spec": spec}
    for name, dec in _JOB_DECODE.items():
        if name not in mapping:  # a column newer than this row's schema: never, after migrations
            values[name] = _JOB_DEFAULTS[name]()
            continue
        raw = mapping[name]
        values[name] = dec(json.loads(raw) if name in _JOB_JSON_FIELDS else raw)
    return Job(**values)
