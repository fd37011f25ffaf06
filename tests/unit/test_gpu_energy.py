"""A job's GPU energy per sampling interval (`services/machine/energy.py`): the GPU's counter
where it has one, power x time where not or where the counter went back, and a shared GPU's
energy split between its jobs."""

from __future__ import annotations

from gpuyard.domain.job import Job, JobSpec
from gpuyard.domain.states import JobState
from gpuyard.services.machine.energy import (
    IntervalEnergy,
    gpu_energy,
    holders_per_gpu,
    job_energy,
)
from gpuyard.services.ports import GpuReading


def _job(job_id: int, *gpus: int) -> Job:
    spec = JobSpec(("train",), "train", "/", gpus=len(gpus))
    return Job(job_id, spec, "alice", JobState.RUNNING, 0.0, gpus=tuple(gpus))


def test_the_counter_gives_the_energy_and_power_times_time_stands_in_without_it() -> None:
    before = {0: GpuReading(0, energy_mj=1_000_000), 1: GpuReading(1, power_w=150.0)}
    now = {
        0: GpuReading(0, energy_mj=1_350_000, power_w=999.0),  # the counter wins
        1: GpuReading(1, power_w=200.0),  # no counter: 200 W x 0.5 s
    }
    assert gpu_energy(before, now, 0.5) == {
        0: IntervalEnergy(350.0, False),
        1: IntervalEnergy(100.0, True),
    }


def test_a_counter_that_went_back_or_an_unreadable_gpu_is_not_a_negative_energy() -> None:
    before = {0: GpuReading(0, energy_mj=9_000_000), 1: GpuReading(1, energy_mj=5)}
    now = {0: GpuReading(0, energy_mj=1_000, power_w=100.0), 1: GpuReading(1, error="lost")}
    assert gpu_energy(before, now, 1.0) == {0: IntervalEnergy(100.0, True)}


def test_jobs_sharing_a_gpu_split_its_energy_so_they_add_up_to_it() -> None:
    running = [_job(7, 0), _job(9, 0, 1)]
    energy = {0: IntervalEnergy(350.0, False), 1: IntervalEnergy(100.0, True)}
    holders = holders_per_gpu(running)
    assert holders == {0: 2, 1: 1}
    assert job_energy(running[0], energy, holders) == IntervalEnergy(175.0, False)
    assert job_energy(running[1], energy, holders) == IntervalEnergy(275.0, True)
    assert job_energy(_job(3, 5), energy, holders) is None
