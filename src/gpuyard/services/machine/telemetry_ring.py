"""The in-memory tier of the GPU history (`gpu_history.py`): every sample of a fixed set of
GPUs for the ring's span, in compact typed columns, and the sums a query takes of its slices.

Kept apart from the queries and the minute-bucket writer because it is the one part on the
telemetry thread's path (`TelemetryRing.record`, ~15 us for 8 GPUs) and the one that decides the
memory figure (15 bytes per GPU per sample and 8 shared: `bench/gpu_history.py`).
"""

from __future__ import annotations

import bisect
import threading
from array import array
from collections.abc import Sequence
from dataclasses import dataclass

from gpuyard.services.ports import GpuReading
from gpuyard.services.stores import GpuBucket

# "n/a" in each column: the type's least value, so a column's max is its peak whenever any
# sample has a value, and a sum corrects for n/a exactly (count x sentinel).
_NA_UTIL, _NA_TEMP, _NA_I32 = -128, -32768, -(2**31)
_SETS_KEPT = 4096  # holder sets kept before the ring, as it turns, forgets unused ones


@dataclass(slots=True)
class ColumnSums:
    """Sums, counts and peaks of one bucket, from ring slices and stored buckets alike."""

    sums: list[float]
    counts: list[float]
    peaks: list[float | None]
    holders: set[int]

    @classmethod
    def empty(cls) -> ColumnSums:
        return cls([0.0] * 4, [0.0] * 4, [None] * 4, set())

    def add_column(self, k: int, values: array[int], na: int, scale: float) -> None:
        n = len(values)
        missing = values.count(na)
        if n == missing:
            return
        self.sums[k] += (sum(values) - na * missing) * scale
        self.counts[k] += n - missing
        peak = max(values) * scale
        current = self.peaks[k]
        self.peaks[k] = peak if current is None else max(current, peak)

    def add_bucket(self, b: GpuBucket) -> None:
        means = (b.util_pct, b.mem_used_mib, b.temp_c, b.power_w)
        peaks = (b.util_peak_pct, b.mem_peak_mib, b.temp_c, b.power_w)
        for k, (mean, peak) in enumerate(zip(means, peaks, strict=True)):
            if mean is None:
                continue
            self.sums[k] += mean * b.resolution_s
            self.counts[k] += b.resolution_s
            top = mean if peak is None else peak
            current = self.peaks[k]
            self.peaks[k] = top if current is None else max(current, top)
        self.holders.update(b.holders)

    @property
    def seen(self) -> bool:
        return any(self.counts)

    def mean(self, k: int) -> float | None:
        return self.sums[k] / self.counts[k] if self.counts[k] else None


@dataclass(frozen=True, slots=True)
class RingWindow:
    """A GPU's ring samples within a window, copied out of the ring (oldest first)."""

    times: array[float]
    util: array[int]
    mem: array[int]
    temp: array[int]
    power_mw: array[int]
    holders: array[int]
    holder_sets: Sequence[tuple[int, ...]]

    def add(self, acc: ColumnSums, lo: int, hi: int) -> None:
        acc.add_column(0, self.util[lo:hi], _NA_UTIL, 1.0)
        acc.add_column(1, self.mem[lo:hi], _NA_I32, 1.0)
        acc.add_column(2, self.temp[lo:hi], _NA_TEMP, 1.0)
        acc.add_column(3, self.power_mw[lo:hi], _NA_I32, 0.001)
        for set_id in set(self.holders[lo:hi]):
            acc.holders.update(self.holder_sets[set_id])


class TelemetryRing:
    """The last `capacity` samples of a fixed set of GPUs, in compact columns. One writer
    (the telemetry thread); readers copy what they need under the lock."""

    def __init__(self, uuids: Sequence[str], capacity: int) -> None:
        self.uuids = tuple(uuids)
        self.capacity = max(1, capacity)
        self._lock = threading.Lock()
        self._times: array[float] = array("d")
        self._util = [array("b") for _ in uuids]
        self._mem = [array("i") for _ in uuids]
        self._temp = [array("h") for _ in uuids]
        self._power = [array("i") for _ in uuids]
        self._holders = [array("i") for _ in uuids]
        self._next = 0  # where the next sample goes once the ring is full
        self._set_ids: dict[tuple[int, ...], int] = {(): 0}
        self._sets: list[tuple[int, ...]] = [()]

    def __len__(self) -> int:
        return len(self._times)

    def add_gpu(self, uuid: str) -> int:
        """One more GPU (a machine joined): n/a for every sample kept so far. Returns its
        position."""
        with self._lock:
            n = len(self._times)
            self.uuids = (*self.uuids, uuid)
            self._util.append(array("b", [_NA_UTIL]) * n)
            self._mem.append(array("i", [_NA_I32]) * n)
            self._temp.append(array("h", [_NA_TEMP]) * n)
            self._power.append(array("i", [_NA_I32]) * n)
            self._holders.append(array("i", [0]) * n)  # set 0: no job
            return len(self.uuids) - 1

    @property
    def oldest_at(self) -> float | None:
        with self._lock:
            if not self._times:
                return None
            return self._times[self._next if len(self._times) == self.capacity else 0]

    @property
    def newest_at(self) -> float | None:
        with self._lock:
            if not self._times:
                return None
            return self._times[(self._next - 1) % len(self._times)]

    def append(
        self, at: float, readings: Sequence[GpuReading | None], holders: Sequence[tuple[int, ...]]
    ) -> None:
        """One sample: `readings[i]` of GPU `uuids[i]` (None or an error: n/a), and the jobs
        that held it. A sample older than the newest (a wall-clock step back) empties the
        ring first: its times must stay in order to be searched."""
        with self._lock:
            if self._times and at < self._times[(self._next - 1) % len(self._times)]:
                self._clear()
            full = len(self._times) == self.capacity
            slot = self._next
            if slot == 0 and full and len(self._sets) > _SETS_KEPT:
                self._compact_sets()
            self._put(self._times, slot, full, at)
            for i, reading in enumerate(readings):
                ok = reading is not None and reading.error is None
                util = reading.util_pct if ok and reading is not None else None
                mem = reading.memory_used_mib if ok and reading is not None else None
                temp = reading.temperature_c if ok and reading is not None else None
                power = reading.power_w if ok and reading is not None else None
                self._put(
                    self._util[i], slot, full, _NA_UTIL if util is None else _clamp(util, -127, 127)
                )
                self._put(
                    self._mem[i], slot, full, _NA_I32 if mem is None else _clamp(mem, 0, 2**31 - 1)
                )
                self._put(
                    self._temp[i],
                    slot,
                    full,
                    _NA_TEMP if temp is None else _clamp(temp, -32767, 32767),
                )
                self._put(
                    self._power[i],
                    slot,
                    full,
                    _NA_I32 if power is None else _clamp(round(power * 1000), 0, 2**31 - 1),
                )
                self._put(self._holders[i], slot, full, self._set_id(holders[i]))
            for i in range(len(readings), len(self._util)):  # a GPU added during this sample
                for column, na in ((self._util, _NA_UTIL), (self._mem, _NA_I32),
                                   (self._temp, _NA_TEMP), (self._power, _NA_I32),
                                   (self._holders, 0)):  # fmt: skip
                    self._put(column[i], slot, full, na)
            self._next = (slot + 1) % self.capacity

    def window(self, gpu: int, since: float, until: float) -> RingWindow:
        """GPU `gpu`'s samples with `since <= t < until`, copied out."""
        with self._lock:
            cut = self._next if len(self._times) == self.capacity else 0
            times = self._times[cut:] + self._times[:cut]
            lo, hi = bisect.bisect_left(times, since), bisect.bisect_left(times, until)

            def part(column: array[int]) -> array[int]:
                return (column[cut:] + column[:cut])[lo:hi]

            return RingWindow(
                times[lo:hi], part(self._util[gpu]), part(self._mem[gpu]),
                part(self._temp[gpu]), part(self._power[gpu]), part(self._holders[gpu]),
                list(self._sets),
            )  # fmt: skip

    def clear(self) -> None:
        with self._lock:
            self._clear()

    def _clear(self) -> None:
        del self._times[:]
        for columns in (self._util, self._mem, self._temp, self._power, self._holders):
            for column in columns:
                del column[:]
        self._next = 0
        self._set_ids, self._sets = {(): 0}, [()]

    @staticmethod
    def _put(column: array, slot: int, full: bool, value: float) -> None:  # type: ignore[type-arg]
        if full:
            column[slot] = value
        else:
            column.append(value)

    def _set_id(self, holders: tuple[int, ...]) -> int:
        found = self._set_ids.get(holders)
        if found is None:
            found = self._set_ids[holders] = len(self._sets)
            self._sets.append(holders)
        return found

    def _compact_sets(self) -> None:
        """Forget the holder sets no sample refers to any more (at a turn of the ring, when
        there are many), so a server that ran a million jobs does not keep a million sets."""
        live = sorted({i for column in self._holders for i in set(column)} | {0})
        if len(live) == len(self._sets):
            return
        renumber = {old: new for new, old in enumerate(live)}
        self._sets = [self._sets[old] for old in live]
        self._set_ids = {s: i for i, s in enumerate(self._sets)}
        for column in self._holders:
            column[:] = array("i", (renumber[v] for v in column))


def _clamp(value: int | float, low: int, high: int) -> int:
    return max(low, min(high, int(value)))
