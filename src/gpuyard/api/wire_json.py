"""A list of wire records encoded straight from their fields, without building a model each.

`GET /api/v1/jobs` answers up to 10,000 jobs, `gpuyard queue` a few hundred many times a
second. Building each job's JobOut (`model_construct`: ~30 us for its 60-odd fields) was two
thirds of the list's cost on the server (bench/mixed_load.py's profile: building job lists was
35 % of the server's time under 50 clients). The same fields as plain dicts, completed with the
model's defaults in the model's field order and given to pydantic-core's own encoder, make the
same bytes as the model's `dump_json` (tests/unit/test_wire_json.py holds that) at a fraction
of the cost.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticUndefined, to_json


class _Shape:
    """A model's fields as the encoder needs them: the defaults in field order (a record is
    laid over a copy), the fields without a default, and those holding records of their own."""

    def __init__(self, model: type[BaseModel]) -> None:
        self.template: dict[str, Any] = {}
        self.required: set[str] = set()
        self.nested: list[tuple[str, _Shape, bool]] = []
        for name, info in model.model_fields.items():
            if info.default_factory is not None:
                self.template[name] = info.default_factory()  # type: ignore[call-arg]
            elif info.default is not PydanticUndefined:
                self.template[name] = info.default
            else:
                self.template[name] = None
                self.required.add(name)
            inner, listed = _record_type(info.annotation)
            if inner is not None:
                self.nested.append((name, _shape_of(inner), listed))

    def complete(self, record: Mapping[str, Any]) -> dict[str, Any]:
        """`record` with the defaults it leaves out, in the model's order (a dict keeps the
        order its keys were first set in: the template's); KeyError for a field missing."""
        if not self.required <= record.keys():
            raise KeyError(f"{sorted(self.required - record.keys())}: required fields missing")
        out = self.template.copy()
        out.update(record)
        for name, inner, listed in self.nested:
            value = out[name]
            if value:
                out[name] = [inner.complete(v) for v in value] if listed else inner.complete(value)
        return out


class WireList:
    """Encodes lists of `model` records given as field dicts (`model`'s nested records as
    dicts too); a field left out gets the model's default."""

    def __init__(self, model: type[BaseModel]) -> None:
        self._shape = _shape_of(model)

    def dump_json(self, records: Iterable[Mapping[str, Any]]) -> bytes:
        complete = self._shape.complete
        return to_json([complete(record) for record in records])

    def dump_one(self, record: Mapping[str, Any]) -> bytes:
        """One record, as `model(**record).model_dump_json()` writes it (the submit's answer:
        building its JobOut cost more CPU than the rest of the answer)."""
        return to_json(self._shape.complete(record))


_SHAPES: dict[type[BaseModel], _Shape] = {}


def _shape_of(model: type[BaseModel]) -> _Shape:
    shape = _SHAPES.get(model)
    if shape is None:
        shape = _SHAPES[model] = _Shape(model)
    return shape


def _record_type(annotation: Any) -> tuple[type[BaseModel] | None, bool]:
    """The model a field's value is a record of (`X`, `X | None`, `list[X]`), and whether it
    is a list of them."""
    origin = typing.get_origin(annotation)
    if origin is list:
        (item,) = typing.get_args(annotation)
        nested, _ = _record_type(item)
        return nested, True
    if origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            nested, listed = _record_type(arg)
            if nested is not None:
                return nested, listed
        return None, False
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, False
    return None, False
