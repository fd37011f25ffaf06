"""The SweepStore port on every store: a sweep written once under its array's id, read back
whole (definition and each trial's parameters, types kept) after a reopen; a second sweep with
the same id is a conflict."""

from __future__ import annotations

from pathlib import Path
from typing import cast

import pytest

from gpuyard.domain.errors import Conflict
from gpuyard.domain.sweep import SweepRecord
from gpuyard.services.stores import SweepStore
from tests.contract.stores import Backend

DEFINITION = {
    "name": "lr ü",
    "command": "python3 train.py --lr {lr}",
    "method": "random",
    "trials": 2,
    "seed": 3,
    "max_running": 1,
    "parameters": {"lr": {"distribution": "loguniform", "min": 1e-4, "max": 0.1}, "l": [1, 2]},
    "metric": {"name": "val_loss", "goal": "minimize"},
    "early_stop": {"rule": "median", "min_steps": 10, "min_trials": 2},
}


def _record(sweep_id: int, owner: str = "ada") -> SweepRecord:
    trials = ({"lr": 0.00123, "l": 1}, {"lr": 0.05, "l": 2})
    return SweepRecord(sweep_id, owner, "lr ü", 1_700_000_000.25, DEFINITION, trials)


def test_a_sweep_is_read_back_whole_after_a_reopen(backend: Backend) -> None:
    store = cast(SweepStore, backend.open())
    assert store.load_sweeps() == []
    store.save_sweep(_record(12))
    store.save_sweep(_record(7, owner="grace"))
    backend.close_all()
    again = cast(SweepStore, backend.open())
    found = again.load_sweeps()
    assert [r.id for r in found] == [7, 12]
    assert found[1] == _record(12)
    assert isinstance(found[1].trials[0]["l"], int) and isinstance(found[1].trials[0]["lr"], float)
    assert found[1].sweep.metric is not None and found[1].sweep.metric.name == "val_loss"


def test_a_second_sweep_with_the_same_id_is_a_conflict(backend: Backend) -> None:
    store = cast(SweepStore, backend.open())
    store.save_sweep(_record(5))
    with pytest.raises(Conflict):
        store.save_sweep(_record(5, owner="grace"))
    assert [r.owner for r in store.load_sweeps()] == ["ada"]


def test_0013_makes_the_sweeps_table_and_its_downgrade_removes_it(tmp_path: Path) -> None:
    import sqlite3

    from tests.contract.test_sqlite_store import migrate

    db = tmp_path / "gpuyard.db"

    def tables() -> set[str]:
        with sqlite3.connect(db) as raw:
            return {r[0] for r in raw.execute("SELECT name FROM sqlite_master WHERE type='table'")}

    migrate(db, "0012")
    assert "sweeps" not in tables()
    migrate(db, "0013")
    assert "sweeps" in tables()
    migrate(db, "0012", down=True)
    assert "sweeps" not in tables() and "jobs" in tables()
