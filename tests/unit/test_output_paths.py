"""sbatch's -o/-e patterns expand as Slurm's batch step expands them."""

from __future__ import annotations

import pytest

from gpuyard.domain.job import Job, JobSpec
from gpuyard.domain.output_paths import NO_TASK, expand_output_path, job_folders
from gpuyard.domain.states import JobState


def _job(job_id: int = 42, array: tuple[int, int] | None = None, name: str = "train") -> Job:
    spec = JobSpec(argv=("true",), name=name, workdir="/home/ada/run")
    array_job_id, task = array if array else (None, None)
    return Job(job_id, spec, "ada", JobState.PENDING, 0.0, array_job_id=array_job_id,
               array_task_id=task)  # fmt: skip


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ("slurm-%j.out", "/home/ada/run/slurm-42.out"),
        ("%x-%J.log", "/home/ada/run/train-42.log"),
        ("%u@%N.%n.%t.%s", "/home/ada/run/ada@gpu1.0.0.batch"),
        ("/scratch/%u/out", "/scratch/ada/out"),
        ("100%%-%j", "/home/ada/run/100%-42"),
        ("%4j-%10j-%12j", "/home/ada/run/0042-0000000042-0000000042"),
        ("%q-%5q-%", "/home/ada/run/%q-%5q-%"),
        ("%3x", "/home/ada/run/train"),
        ("logs/%A_%a.out", f"/home/ada/run/logs/42_{NO_TASK}.out"),
    ],
)
def test_patterns_of_a_job_outside_an_array(pattern: str, expected: str):
    assert expand_output_path(pattern, _job(), "ada", "gpu1.lab.example") == expected


def test_an_array_tasks_patterns_name_the_array_and_the_index():
    task = _job(47, array=(40, 17))
    assert expand_output_path("%A_%a-%b-%j.out", task, "ada", "n") == "/home/ada/run/40_17-7-47.out"
    assert expand_output_path("%3a", task, "ada", "n") == "/home/ada/run/017"


def test_a_backslash_turns_expansion_off_as_in_slurm():
    assert expand_output_path("out\\%j", _job(), "ada", "n") == "/home/ada/run/out%j"


@pytest.mark.parametrize(
    ("pattern", "folders"),
    [
        ("logs/%j/%j_0_log.out", ["/home/ada/run/logs/42"]),  # submitit's
        ("/scratch/%u/%x/b/out", ["/scratch/ada", "/scratch/ada/train", "/scratch/ada/train/b"]),
        ("logs/%4j.out", []),  # the file's own name: no folder
        ("no/such/folder/%j.out", []),  # written out in full: must be there, as on Slurm
        ("100%%/%j.out", []),
        ("logs/%q/x", []),  # not a pattern
        ("logs\\/%j/x", []),  # taken as written
    ],
)
def test_the_folders_a_pattern_names_are_made_for_the_job(pattern: str, folders: list[str]):
    assert job_folders(pattern, _job(), "ada", "gpu1") == folders


def test_a_name_that_expands_to_a_path_makes_no_folder():
    assert job_folders("logs/%x/out", _job(name="../../etc"), "ada", "gpu1") == []
    assert job_folders("logs/%x/out", _job(name=".."), "ada", "gpu1") == []
