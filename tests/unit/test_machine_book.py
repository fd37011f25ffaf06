"""The cluster's GPU numbers hold across restarts (`adapters/ray/machine_book.py`): machines
keep their order whatever joined when and whoever is away; new ones come after them."""

from __future__ import annotations

from pathlib import Path

from gpuyard.adapters.ray.machine_book import KnownMachine, MachineBook, numbered
from gpuyard.domain.job import Gpu, NodeCapacity


def _machine(name: str, gpus: int) -> KnownMachine:
    return KnownMachine(
        NodeCapacity(name, 8, 64_000),
        tuple(Gpu(i, f"GPU-{name}-{i}", "NVIDIA H100", 81_559, True, name) for i in range(gpus)),
    )


def _numbers(machines: list[KnownMachine]) -> list[tuple[str, list[int]]]:
    return [(m.name, [g.index for g in m.gpus]) for m in machines]


def test_machines_keep_their_numbers_in_the_order_they_first_came(tmp_path: Path) -> None:
    book = MachineBook(tmp_path)
    first, away = numbered(book.load(), [_machine("head", 2), _machine("zeta", 2)])
    book.save([*first, _machine("alpha", 2)])  # alpha joined later: after zeta
    again, away = numbered(book.load(), [_machine("head", 2), _machine("alpha", 2),
                                          _machine("zeta", 2)])  # fmt: skip
    assert _numbers(again) == [("head", [0, 1]), ("zeta", [2, 3]), ("alpha", [4, 5])]
    assert away == []
    assert [g.uuid for g in again[2].gpus] == ["GPU-alpha-0", "GPU-alpha-1"]


def test_a_machine_away_keeps_its_numbers_and_a_new_one_comes_after_it(tmp_path: Path) -> None:
    book = MachineBook(tmp_path)
    book.save(numbered([], [_machine("head", 2), _machine("a", 1), _machine("b", 2)])[0])
    order, away = numbered(book.load(), [_machine("head", 2), _machine("b", 2), _machine("c", 1)])
    assert _numbers(order) == [("head", [0, 1]), ("a", [2]), ("b", [3, 4]), ("c", [5])]
    assert away == ["a"]
    assert order[1].gpus[0].uuid == "GPU-a-0"  # as it was last seen


def test_an_unreadable_book_numbers_afresh(tmp_path: Path) -> None:
    (tmp_path / "machines.json").write_text("{not json")
    assert MachineBook(tmp_path).load() == []
    assert (tmp_path / "machines.json").exists()
