"""Each GPU's energy over one sampling interval, and each running job's share of it (pure).

From the GPU's own energy counter (NVML's total energy consumption, mJ since the driver
loaded) where both samples have it and it did not go back (a driver reload resets it); else
its power draw times the interval ("integrated": an estimate, as Slurm's energy plugins make
from power readings). A GPU shared by several jobs (`--gpu-mem`) splits its energy evenly
between them, so the jobs' energies add up to the GPU's, never more.

Example: GPU 0's counter read 1,000,000 mJ, then 1,350,000 mJ a second later: 350 J. Jobs 7
and 9 share it: 175 J each. GPU 1 has no counter and drew 200 W over 0.5 s: 100 J, integrated.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gpuyard.domain.job import Job
from gpuyard.services.ports import GpuReading


@dataclass(frozen=True, slots=True)
class IntervalEnergy:
    """One GPU's energy in one interval; `integrated`: from power x time, not its counter."""

    joules: float
    integrated: bool


def gpu_energy(
    before: Mapping[int, GpuReading], now: Mapping[int, GpuReading], dt_s: float
) -> dict[int, IntervalEnergy]:
    """Each GPU read in `now` (and without error) with an energy figure for the interval."""
    out: dict[int, IntervalEnergy] = {}
    for index, reading in now.items():
        if reading.error is not None:
            continue
        earlier = before.get(index)
        was = None if earlier is None or earlier.error is not None else earlier.energy_mj
        if reading.energy_mj is not None and was is not None and reading.energy_mj >= was:
            out[index] = IntervalEnergy((reading.energy_mj - was) / 1000.0, False)
        elif reading.power_w is not None and dt_s > 0:
            out[index] = IntervalEnergy(reading.power_w * dt_s, True)
    return out


def holders_per_gpu(running: Iterable[Job]) -> dict[int, int]:
    """How many running jobs hold each GPU (more than one: shared with --gpu-mem)."""
    count: dict[int, int] = {}
    for job in running:
        for index in set(job.gpus):
            count[index] = count.get(index, 0) + 1
    return count


def job_energy(
    job: Job, energy: Mapping[int, IntervalEnergy], holders: Mapping[int, int]
) -> IntervalEnergy | None:
    """The job's share over its GPUs; None if none of them has an energy figure."""
    mine = [(energy[i], holders.get(i, 1) or 1) for i in set(job.gpus) if i in energy]
    if not mine:
        return None
    return IntervalEnergy(sum(e.joules / n for e, n in mine), any(e.integrated for e, _ in mine))
