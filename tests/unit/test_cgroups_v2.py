"""`JobCgroups` on cgroup v2, over a hand-made cgroup tree (plain files: this machine's v2
has too few controllers to run it for real; v1 runs for real in tests/e2e/test_cgroups.py)."""

from __future__ import annotations

from pathlib import Path

from gpuyard.adapters.executor.cgroups import JobCgroups, other_gpu_minors


def _v2_tree(root: Path) -> Path:
    """A v2 mount where the server's own group offers memory, cpu and pids."""
    own = root / "system.slice" / "gpuyard.service"
    own.mkdir(parents=True)
    (root / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    for folder in (own,):
        (folder / "cgroup.controllers").write_text("cpu memory pids\n")
        (folder / "cgroup.subtree_control").write_text("")
    return own


def _prepare_levels(own: Path, scope: str) -> None:
    """What the kernel would show in the folders JobCgroups makes (plain mkdir makes none)."""
    for level in (own / "gpuyard", own / "gpuyard" / scope):
        level.mkdir(parents=True, exist_ok=True)
        (level / "cgroup.controllers").write_text("cpu memory pids\n")
        (level / "cgroup.subtree_control").write_text("")


def test_v2_limits_and_the_oom_kill_counter(tmp_path: Path):
    own = _v2_tree(tmp_path)
    _prepare_levels(own, "s1")
    self_cgroup = tmp_path / "self_cgroup"
    self_cgroup.write_text("0::/system.slice/gpuyard.service\n")
    groups = JobCgroups("s1", pids_max=100, root=tmp_path, self_cgroup=str(self_cgroup))
    assert groups.available and groups.describe().startswith("cgroup v2")
    assert "+memory" in (own / "cgroup.subtree_control").read_text()  # delegated downwards
    made = groups.create(7, groups.limits(mem_mib=512, cpus=3, gpus=(0,)))
    job = own / "gpuyard" / "s1" / "job-7"
    assert made == [str(job)]
    assert (job / "memory.max").read_text() == str(512 << 20)
    assert (job / "memory.swap.max").read_text() == "0"
    assert (job / "cpu.max").read_text() == "300000 100000"
    assert (job / "pids.max").read_text() == "100"
    assert not groups.out_of_memory(7)
    (job / "memory.events").write_text("low 0\nhigh 0\nmax 12\noom 1\noom_kill 1\n")
    assert groups.out_of_memory(7)


def test_no_cgroup_file_system_means_advisory_limits(tmp_path: Path):
    groups = JobCgroups("s1", root=tmp_path, self_cgroup=str(tmp_path / "missing"))
    assert not groups.available
    assert groups.describe().startswith("none (no cgroup file system")


def test_the_other_gpus_are_every_gpu_but_the_jobs_own():
    assert other_gpu_minors((1,), (0, 1, 2, 3)) == [0, 2, 3]
    assert other_gpu_minors((), (0, 1)) == [0, 1]
