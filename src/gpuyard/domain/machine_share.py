"""How much of a machine jobs may take, so that the server and the machine keep what they need.

Worked example. A 64 GiB machine with 16 CPUs: the jobs together get 64 GiB less a tenth
(6.4 GiB kept for the server and the machine), and a job that asks no `--mem` gets its share
per CPU of that, 3.6 GiB for each CPU it asks for (Slurm's DefMemPerCPU, unless the admin set
one). Processes: the kernel's pid_max of 32,768 gives all jobs together 24,576 and one user's
jobs together 16,384, so no user's fork bomb can take the last pids of the machine.
"""

from __future__ import annotations

_RESERVE_MIN_MIB = 512
_RESERVE_MAX_MIB = 4096


def mem_reserve_mib(total_mib: int, asked_mib: int = 0) -> int:
    """What the server and the machine keep of `total_mib`: the admin's `asked_mib`, else a
    tenth, at least 512 MiB and at most 4 GiB; never more than half of a small total."""
    if asked_mib > 0:
        return min(asked_mib, total_mib // 2)
    return min(max(total_mib // 10, _RESERVE_MIN_MIB), _RESERVE_MAX_MIB, total_mib // 2)


# How submit's hint of the default memory begins (`api/submit_route.py`): `gpuyard sbatch`
# leaves it out, as Slurm's sbatch says nothing of DefMemPerCPU (tools read its stderr too).
DEFAULT_MEM_HINT = "no --mem given:"


def default_mem_per_cpu_mib(total_mib: int, cpus: int, reserve_mib: int = 0) -> int:
    """Memory a job that asks none gets per CPU: the jobs' share of the machine over its CPUs."""
    return max(1, (total_mib - mem_reserve_mib(total_mib, reserve_mib)) // max(1, cpus))


def pids_shares(pid_max: int, jobs_asked: int = 0, user_asked: int = 0) -> tuple[int, int]:
    """The most processes and threads (all jobs together, one user's jobs together): the
    admin's, else three quarters and half of the kernel's `pid_max`."""
    jobs = jobs_asked if jobs_asked > 0 else pid_max * 3 // 4
    user = user_asked if user_asked > 0 else pid_max // 2
    return jobs, min(user, jobs)
