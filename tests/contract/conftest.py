"""Fixtures of the store contract suite: every test taking `store` or `backend` runs once per
store in `stores.STORE_BACKENDS`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuyard.services.ports import JobStore
from tests.contract.stores import STORE_BACKENDS, Backend, BackendFactory


def _backend_id(factory: BackendFactory) -> str:
    return factory.__name__.removesuffix("_backend")


@pytest.fixture(params=STORE_BACKENDS, ids=_backend_id)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    made: Backend = request.param(tmp_path, request)
    yield made
    made.remove()


@pytest.fixture
def store(backend: Backend) -> JobStore:
    return backend.open()
