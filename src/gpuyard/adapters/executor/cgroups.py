"""Per-job control groups: the job's `--mem`, `--cpus`, a pids limit and its own GPUs only,
held by the kernel rather than by the job's good will (CUDA_VISIBLE_DEVICES is advisory: a job
can unset it).

Where: under the server's own cgroup (a systemd unit's, or wherever it was started), in
`gpuyard/<scope>/user-<uid>/job-<id>`, so the admin's limits on the server also bound its
jobs. `<scope>` holds all of this server's jobs to the server's memory (its group's limit,
else the machine's) less a reserve, so a job's OOM kill happens among the jobs and never takes
the server or a job within its own --mem, and to a pids limit for all jobs; `user-<uid>` to a
pids limit for each user's jobs together (`domain/machine_share.py` says how much). cgroup v2 when
its `memory`, `cpu` and `pids` controllers can be enabled there, else the v1 hierarchies of
those controllers and of `devices` (v1 alone confines devices here: v2 needs a BPF program).
Without either (not root, no cgroup file system), the limits are advisory: `describe()` says
so, and `gpuyard doctor` shows it.

    memory  v2 memory.max (+ memory.swap.max 0) | v1 memory.limit_in_bytes (+ memsw)  = --mem
    cpu     v2 cpu.max "Q 100000"               | v1 cpu.cfs_quota_us Q               = --cpus
    pids    pids.max                                                              = pids_max
    devices v1 devices.deny "c 195:N rwm" for every other GPU's /dev/nvidiaN (the control
            devices, nvidiactl and nvidia-uvm, stay open: CUDA needs them), and
            "c 226:M rwm" for every other AMD GPU's render node /dev/dri/renderD<M>
            (`gpu_device_numbers`: M read from sysfs by the GPU's PCI address); /dev/kfd
            stays open: every AMD GPU's compute queues go through that one device, and
            ROCm finds a GPU through its render node, so a job cannot use one it may not
            open (ROCm's own rule for containers)

The executor makes the groups before the supervisor starts and names them in `launch.json`;
the job's process joins them (writes itself to each `tasks` on v1, `cgroup.procs` on v2:
`supervisor._join` says why) before it drops its privileges, so the supervisor stays outside
(an OOM kill never takes it). When the job has ended the executor reads whether the kernel
killed it for memory (v2 memory.events `oom_kill`, v1 memory.oom_control `oom_kill`), and
why (`oom_cause`: its own limit was hit, v1 memory.failcnt / v2 memory.events `max`; else all
jobs' limit, or the machine), and removes the groups.
"""

from __future__ import annotations

import contextlib
import glob
import logging
import os
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from gpuyard.domain.job import Gpu
from gpuyard.domain.machine_share import mem_reserve_mib, pids_shares

log = logging.getLogger("gpuyard.cgroups")

ROOT = Path("/sys/fs/cgroup")
NVIDIA_MAJOR = 195  # /dev/nvidiaN is (195, N); nvidiactl is 195:255
DRM_MAJOR = 226  # /dev/dri/renderD128 is (226, 128); /dev/kfd has a major of its own
_AMD_PCI_VENDOR = "0x1002"
_PERIOD_US = 100_000
_V1_CONTROLLERS = ("memory", "cpu", "pids", "devices")
_V2_CONTROLLERS = ("memory", "cpu", "pids")
_STALE_S = 60.0
_PEAK_SLACK_B = 1 << 20  # a group whose peak came this close to its limit reached it


@dataclass(frozen=True, slots=True)
class JobLimits:
    """What one job's groups hold it to (None: no limit of that kind)."""

    mem_mib: int | None
    cpus: int | None
    pids_max: int | None
    own_gpus: tuple[int, ...]
    all_gpus: tuple[int, ...]
    # (major, minor) of each GPU's device node by index (`gpu_device_numbers`); empty: the
    # NVIDIA rule, /dev/nvidiaN for GPU N.
    gpu_devices: tuple[tuple[int, int, int], ...] = ()
    uid: int | None = None  # whose job: its group sits in that user's (None: in the scope)


class JobCgroups:
    """Makes, reads and removes per-job groups on this machine's cgroup file system."""

    def __init__(
        self,
        scope: str,
        *,
        pids_max: int | None = None,
        all_gpus: tuple[int, ...] = (),
        root: Path = ROOT,
        self_cgroup: str = "/proc/self/cgroup",
        gpu_devices: Mapping[int, tuple[int, int]] | None = None,
        jobs_mem_reserve_mib: int = 0,
        jobs_pids_max: int = 0,
        user_pids_max: int = 0,
        meminfo: str = "/proc/meminfo",
        pid_max: str = "/proc/sys/kernel/pid_max",
    ) -> None:
        """`scope`: this server's own folder under `gpuyard/` (two servers on one machine
        both have a job 1); `pids_max`: every job's limit; `all_gpus`: the server's GPUs;
        `gpu_devices`: each GPU's device node (major, minor) by index, where they are not
        NVIDIA's /dev/nvidiaN (`gpu_device_numbers`); `jobs_mem_reserve_mib`: what all jobs
        together leave the server and the machine (0: `mem_reserve_mib`'s); `jobs_pids_max`,
        `user_pids_max`: processes of all jobs, of one user's jobs (0: `pids_shares`')."""
        self._scope = scope
        self.pids_max = pids_max
        self.all_gpus = all_gpus
        self.gpu_devices = tuple(
            sorted((i, major, minor) for i, (major, minor) in (gpu_devices or {}).items())
        )
        self._v2: Path | None = None
        self._v1: dict[str, Path] = {}
        self._why_not = ""
        self._lock = threading.Lock()  # a user's folder is made by one launch at a time
        self._uids: dict[int, int] = {}  # job id -> whose group it is in
        self._scope_fails: dict[int, int] = {}  # job id -> all jobs' limit hits at its start
        self.jobs_mem_mib: int | None = None  # all jobs together (None: not held)
        try:
            self._find(root, Path(self_cgroup).read_text())
        except OSError as exc:
            self._why_not = f"no cgroup file system ({exc.strerror or exc})"
        jobs_pids, self.user_pids_max = pids_shares(
            _read_int(Path(pid_max)) or 32768, jobs_pids_max, user_pids_max
        )
        if self.available:
            self._hold_all_jobs(root, _mem_total_mib(meminfo), jobs_mem_reserve_mib, jobs_pids)

    @property
    def available(self) -> bool:
        return self._v2 is not None or bool(self._v1)

    def describe(self) -> str:
        """One line for `gpuyard doctor` and the start banner."""
        if self._v2 is not None:
            return f"cgroup v2 ({', '.join(_V2_CONTROLLERS)}): --mem, --cpus and pids enforced"
        if self._v1:
            held = ", ".join(sorted(self._v1))
            return f"cgroup v1 ({held}): --mem, --cpus, pids and GPU devices enforced"
        return f"none ({self._why_not}): --mem, --cpus and GPU devices are advisory"

    def _find(self, root: Path, own: str) -> None:
        """The server's own groups, per hierarchy (`/proc/self/cgroup`), and which of them
        take a child group of ours."""
        v1_paths: dict[str, str] = {}
        v2_path = None
        for line in own.splitlines():
            _, controllers, path = line.split(":", 2)
            if controllers == "":
                v2_path = path
            for name in controllers.split(","):
                v1_paths[name] = path
        v1 = {}
        for name in _V1_CONTROLLERS:
            mount = root / name
            if name in v1_paths and (mount / "cgroup.procs").exists():
                base = mount / v1_paths[name].lstrip("/") / "gpuyard"
                if _make_dir(base) and _sweep(base) and _make_dir(base / self._scope):
                    v1[name] = base / self._scope
        if "memory" in v1:  # the one that matters most; without it, v2 may do better
            self._v1 = v1
            return
        if v2_path is not None:
            for mount in (root, root / "unified"):
                base = mount / v2_path.lstrip("/") / "gpuyard"
                ours = base / self._scope
                if (mount / "cgroup.controllers").exists() and _enable_v2(base, ours):
                    _sweep(base, keep=ours)
                    self._v2 = ours
                    return
        self._v1 = v1
        self._why_not = "no writable memory controller (the server must run as root)"

    def _hold_all_jobs(self, root: Path, total_mib: int, reserve_mib: int, pids: int) -> None:
        """The scope's limits: the server's memory less the reserve, and the pids of all jobs."""
        scope = self._v2 if self._v2 is not None else self._v1.get("memory")
        if scope is not None:
            above = _limit_above_mib(scope, "memory.max" if self._v2 else "memory.limit_in_bytes")
            total = min(total_mib, above) if above else total_mib
            jobs_mib = total - mem_reserve_mib(total, reserve_mib)
            try:
                if self._v2 is not None:
                    _write(scope / "memory.max", str(jobs_mib << 20))
                else:
                    # RAM alone (each job's own group holds its swap): the kernel counts
                    # this limit's hits (failcnt) only where the RAM counter is the one hit.
                    _write(scope / "memory.limit_in_bytes", str(jobs_mib << 20))
                self.jobs_mem_mib = jobs_mib
            except OSError as exc:
                log.warning("cannot hold all jobs below %d MiB (%s)", jobs_mib, exc)
        pids_scope = self._v2 if self._v2 is not None else self._v1.get("pids")
        if pids_scope is not None:
            with contextlib.suppress(OSError):
                _write(pids_scope / "pids.max", str(pids))

    # -- per job ------------------------------------------------------------------------
    def limits(
        self, mem_mib: int, cpus: int, gpus: tuple[int, ...], *, uid: int | None = None
    ) -> JobLimits:
        """A job's limits from its request (0: none asked); `uid`: whose job it is."""
        return JobLimits(
            mem_mib or None, cpus or None, self.pids_max, gpus, self.all_gpus, self.gpu_devices,
            uid,
        )  # fmt: skip

    def _user_folder(self, base: Path, uid: int | None, v2: bool = False) -> Path:
        """Where a job of `uid` gets its group: that user's folder (made, its pids limit
        written), or the scope itself for a job of nobody in particular."""
        if uid is None:
            return base
        folder = base / f"user-{uid}"
        if v2:
            _delegate(folder)
        else:  # parents: another server's start may sweep our empty folder just before
            folder.mkdir(parents=True, exist_ok=True)
        if (folder / "pids.max").exists():
            _write(folder / "pids.max", str(self.user_pids_max))
        return folder

    def _group(self, base: Path, job_id: int) -> Path:
        uid = self._uids.get(job_id)
        name = f"job-{job_id}"
        if uid is not None:
            return base / f"user-{uid}" / name
        found = glob.glob(str(base / "user-*" / name))  # a job adopted after a restart
        return Path(found[0]) if found else base / name

    def create(self, job_id: int, limits: JobLimits) -> list[str]:
        """The job's groups, limits written (an earlier run's are replaced); their folders,
        for the launch file. [] when there are none (advisory limits)."""
        self.remove(job_id)
        name = f"job-{job_id}"
        with self._lock:
            if limits.uid is not None:
                self._uids[job_id] = limits.uid
            if self._v2 is not None:
                if not self._v2.exists():  # swept by another server's start while we had none
                    _delegate(self._v2)
                self._scope_fails[job_id] = _counter(self._v2 / "memory.events.local", "max")
                group = self._user_folder(self._v2, limits.uid, v2=True) / name
                group.mkdir()
                _write_v2(group, limits)
                return [str(group)]
            made = []
            for controller, base in self._v1.items():
                if not _limits_in(controller, limits):
                    continue  # each group the job joins costs its start ~1 ms (v1 migration)
                base.mkdir(exist_ok=True)  # swept by another server's start while we had none
                if controller == "memory":
                    self._scope_fails[job_id] = _read_int(base / "memory.failcnt")
                group = self._user_folder(base, limits.uid) / name
                group.mkdir()
                made.append(str(group))
                _write_v1(controller, group, limits)
            return made

    def out_of_memory(self, job_id: int) -> bool:
        """Whether the kernel killed a process of the job for memory."""
        return self.oom_cause(job_id) is not None

    def oom_cause(self, job_id: int) -> str | None:
        """Why the kernel killed a process of the job for memory: "own" (the job reached its
        own --mem), "jobs" (all jobs together reached theirs: `jobs_mem_mib`), "machine"
        (the server's group or the machine ran out); None: it did not."""
        base = self._v2 if self._v2 is not None else self._v1.get("memory")
        if base is None:
            return None
        group = self._group(base, job_id)
        if self._v2 is not None:
            if _counter(group / "memory.events", "oom_kill") == 0:
                return None
            own = _counter(group / "memory.events", "max") > 0
            scope_fails = _counter(base / "memory.events.local", "max")
        else:
            if _counter(group / "memory.oom_control", "oom_kill") == 0:
                return None
            own = _reached_v1(group)
            scope_fails = _read_int(base / "memory.failcnt")
        if own:
            return "own"
        return "jobs" if scope_fails > self._scope_fails.get(job_id, scope_fails) else "machine"

    def close(self) -> None:
        """Remove this server's folder once no job's group is left in it (a job still running
        across a restart keeps it: rmdir of a folder with groups fails, and that is fine)."""
        bases = [self._v2] if self._v2 is not None else list(self._v1.values())
        for base in bases:
            if base is None:
                continue
            for folder in glob.glob(str(base / "user-*")):
                with contextlib.suppress(OSError):
                    os.rmdir(folder)
            with contextlib.suppress(OSError):
                base.rmdir()

    def remove(self, job_id: int) -> None:
        """Remove the job's groups (its processes are gone; a straggler is killed first)."""
        bases = [self._v2] if self._v2 is not None else list(self._v1.values())
        with self._lock:
            for base in bases:
                if base is not None:
                    _remove_group(self._group(base, job_id))
            self._uids.pop(job_id, None)
            self._scope_fails.pop(job_id, None)


def _make_dir(path: Path) -> bool:
    try:
        path.mkdir(exist_ok=True)
        return os.access(path / "cgroup.procs", os.W_OK)
    except OSError:
        return False


def _sweep(base: Path, keep: Path | None = None) -> bool:
    """Remove what servers killed with running jobs left: their jobs' groups once empty and
    older than a minute (a job joins its group within milliseconds of its making; a live
    server removes an ended job's group within seconds), then their empty folders (a live
    server whose folder this removes makes it again at its next job).

    Ages are read on the cgroup file system's own clock (a probe folder's mtime), not this
    process's: a server whose wall clock is off by a day saw every other server's group made
    a moment ago as a day old, and removed it before its job could join (exit 127)."""
    stale = _fs_now(base) - _STALE_S
    with contextlib.suppress(OSError):
        for folder in base.iterdir():
            if not folder.is_dir():
                continue
            for group in [*folder.glob("job-*"), *folder.glob("user-*/job-*")]:
                with contextlib.suppress(OSError):
                    if group.stat().st_mtime < stale and not _pids(group):
                        group.rmdir()
            for user in folder.glob("user-*"):
                with contextlib.suppress(OSError):
                    if user.stat().st_mtime < stale:
                        user.rmdir()
            if folder != keep:
                with contextlib.suppress(OSError):
                    folder.rmdir()
    return True


def _fs_now(base: Path) -> float:
    """The time the kernel stamps on a folder made under `base` now; this process's clock if
    none can be made."""
    probe = base / f".clock-probe-{os.getpid()}"
    try:
        probe.mkdir()
        try:
            return probe.stat().st_mtime
        finally:
            probe.rmdir()
    except OSError:
        return time.time()


def _enable_v2(base: Path, ours: Path) -> bool:
    """`gpuyard/<scope>` under the server's v2 group, memory, cpu and pids given to the
    children of each level (the jobs' groups)."""
    return _delegate(base) and _delegate(ours)


def _delegate(base: Path) -> bool:
    try:
        parent = base.parent
        offered = (parent / "cgroup.controllers").read_text().split()
        if not set(_V2_CONTROLLERS) <= set(offered):
            return False
        enabled = (parent / "cgroup.subtree_control").read_text().split()
        if not set(_V2_CONTROLLERS) <= set(enabled):
            _write(parent / "cgroup.subtree_control", " ".join(f"+{c}" for c in _V2_CONTROLLERS))
        base.mkdir(exist_ok=True)
        _write(base / "cgroup.subtree_control", " ".join(f"+{c}" for c in _V2_CONTROLLERS))
        return True
    except OSError:
        return False


def _write(path: Path, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def _write_v2(group: Path, limits: JobLimits) -> None:
    if limits.mem_mib:
        _write(group / "memory.max", str(limits.mem_mib << 20))
        with contextlib.suppress(OSError):  # no swap accounting: memory.max alone
            _write(group / "memory.swap.max", "0")
    if limits.cpus:
        _write(group / "cpu.max", f"{limits.cpus * _PERIOD_US} {_PERIOD_US}")
    if limits.pids_max:
        _write(group / "pids.max", str(limits.pids_max))


def _limits_in(controller: str, limits: JobLimits) -> bool:
    """Whether a v1 group of this controller would hold the job to anything."""
    if controller == "devices":
        return bool(denied_devices(limits))
    if controller == "memory":  # always: every job is under all jobs' limit
        return True
    wanted = {"cpu": limits.cpus, "pids": limits.pids_max or limits.uid is not None}
    return bool(wanted.get(controller))


def _write_v1(controller: str, group: Path, limits: JobLimits) -> None:
    if controller == "memory" and limits.mem_mib:
        _write(group / "memory.limit_in_bytes", str(limits.mem_mib << 20))
        with contextlib.suppress(OSError):  # no swap accounting: RAM limited, swap not
            _write(group / "memory.memsw.limit_in_bytes", str(limits.mem_mib << 20))
    elif controller == "cpu" and limits.cpus:
        _write(group / "cpu.cfs_period_us", str(_PERIOD_US))
        _write(group / "cpu.cfs_quota_us", str(limits.cpus * _PERIOD_US))
    elif controller == "pids" and limits.pids_max:
        _write(group / "pids.max", str(limits.pids_max))
    elif controller == "devices":
        for major, minor in denied_devices(limits):
            _write(group / "devices.deny", f"c {major}:{minor} rwm")


def denied_devices(limits: JobLimits, dri: str = "/dev/dri") -> list[tuple[int, int]]:
    """The GPU device nodes a job must not open: without `gpu_devices`, NVIDIA's rule
    (`other_gpu_minors`); with them, every other GPU's node, every /dev/nvidiaN that is not
    the job's, and, when the server has AMD GPUs, every other AMD render node present."""
    if not limits.gpu_devices:
        return [(NVIDIA_MAJOR, m) for m in other_gpu_minors(limits.own_gpus, limits.all_gpus)]
    devices = {i: (major, minor) for i, major, minor in limits.gpu_devices}
    own = {devices[i] for i in limits.own_gpus if i in devices}
    every = set(devices.values()) | {(NVIDIA_MAJOR, m) for m in _present_nvidia_minors()}
    if any(major == DRM_MAJOR for major, _ in every):
        every |= {(DRM_MAJOR, m) for m in _present_amd_render_minors(dri)}
    return sorted(every - own)


def gpu_device_numbers(gpus: Sequence[Gpu], sys_root: str = "/sys") -> dict[int, tuple[int, int]]:
    """Each GPU's device node (major, minor) by index: an AMD GPU's DRM render node, found
    under its PCI address (`/sys/bus/pci/devices/<bdf>/drm/renderD<minor>`); any other GPU's
    /dev/nvidiaN (N: its NVML index). An AMD GPU whose render node is not found there (a
    partition of a GPU in CPX mode is not a PCI device of its own) is left out: not denied."""
    out: dict[int, tuple[int, int]] = {}
    for gpu in gpus:
        if gpu.vendor != "amd":
            out[gpu.index] = (NVIDIA_MAJOR, gpu.index if gpu.device_index is None
                              else gpu.device_index)  # fmt: skip
            continue
        minor = _render_minor(os.path.join(sys_root, "bus/pci/devices", _bdf(gpu.pci_bus_id)))
        if minor is not None:
            out[gpu.index] = (DRM_MAJOR, minor)
    return out


def _bdf(pci_bus_id: str) -> str:
    """sysfs's form of a PCI address: "0000:c1:00.0" (NVML writes an 8-digit domain)."""
    text = pci_bus_id.strip().lower()
    domain, sep, rest = text.partition(":")
    if sep and len(domain) > 4 and rest.count(":") == 1:
        return f"{domain[-4:]}:{rest}"
    return text


def _render_minor(device: str) -> int | None:
    if not device.rstrip("/").split("/")[-1]:
        return None
    try:
        names = os.listdir(os.path.join(device, "drm"))
    except OSError:
        return None
    for name in names:
        tail = name.removeprefix("renderD")
        if tail != name and tail.isdigit():
            return int(tail)
    return None


def _present_nvidia_minors() -> set[int]:
    present = set()
    for node in glob.glob("/dev/nvidia[0-9]*"):
        tail = node.removeprefix("/dev/nvidia")
        if tail.isdigit():
            present.add(int(tail))
    return present


def _present_amd_render_minors(dri: str, sys_root: str = "/sys") -> set[int]:
    """Render nodes present whose device is an AMD one (other GPUs' stay open)."""
    found = set()
    for node in glob.glob(os.path.join(dri, "renderD[0-9]*")):
        name = os.path.basename(node)
        vendor = os.path.join(sys_root, "class/drm", name, "device/vendor")
        try:
            with open(vendor) as f:
                if f.read().strip() != _AMD_PCI_VENDOR:
                    continue
        except OSError:
            continue
        found.add(int(name.removeprefix("renderD")))
    return found


def other_gpu_minors(own: tuple[int, ...], every: tuple[int, ...]) -> list[int]:
    """The minors of the GPU device nodes the job must not open: every GPU of the server's
    inventory and every /dev/nvidiaN present, but its own (the node's minor is the GPU's
    index: NVML numbers GPUs in PCI bus order, as the driver numbers its nodes)."""
    return sorted((_present_nvidia_minors() | set(every)) - set(own))


def _counter(path: Path, key: str) -> int:
    try:
        for line in path.read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    except (OSError, ValueError):
        pass
    return 0


def _reached_v1(group: Path) -> bool:
    """Whether a v1 group reached its own limit: a hit counted, or its peak at the limit (the
    kernel keeps no count for the RAM+swap counter, which a limit on both hits first)."""
    if _read_int(group / "memory.failcnt") or _read_int(group / "memory.memsw.failcnt"):
        return True
    for kind in ("memory", "memory.memsw"):
        limit = _read_int(group / f"{kind}.limit_in_bytes")
        peak = _read_int(group / f"{kind}.max_usage_in_bytes")
        if 0 < limit < (1 << 62) and peak >= limit - _PEAK_SLACK_B:
            return True
    return False


def _read_int(path: Path) -> int:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


def _mem_total_mib(meminfo: str) -> int:
    try:
        with open(meminfo) as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) // 1024
    except (OSError, ValueError, IndexError):
        pass
    return 1 << 40


def _limit_above_mib(scope: Path, name: str) -> int:
    """The smallest memory limit of the groups above the scope's `gpuyard/` folder (the
    server's own group and its parents, up to the hierarchy's root, which has no limit
    file on v2 and an unlimited one on v1); 0: none."""
    found = 0
    group = scope.parent.parent
    while group.parent != group:
        try:
            text = (group / name).read_text().strip()
        except OSError:
            return found  # above the hierarchy's root
        if text != "max" and text.isdigit() and int(text) < (1 << 62):
            found = min(found or int(text) >> 20, int(text) >> 20)
        group = group.parent
    return found


def _remove_group(group: Path) -> None:
    """rmdir, once whatever is still in it is killed (a cgroup with processes is busy)."""
    for _ in range(50):
        try:
            group.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            for pid in _pids(group):
                with contextlib.suppress(OSError):
                    os.kill(pid, 9)
            time.sleep(0.02)
    log.warning("cannot remove the cgroup %s: it still holds processes", group)


def _pids(group: Path) -> list[int]:
    try:
        return [int(p) for p in (group / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []
