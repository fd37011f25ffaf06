"""The rules that make a job spec valid, and its defaults, decided once for every front door.

The API, the SDK (through the API), a future `#SBATCH` parser and the dashboard's form all turn
what the submitter said into a `SpecDraft` (units already parsed, `None` where they said
nothing) and call `decide_spec`. So a rule answers the same wherever a job comes from: an SDK
user who gives `gpu_mem` gets the one GPU a CLI user gets, not an error.

    decide_spec(SpecDraft(argv=("python", "t.py"), gpu_mem_mib=8192), default_workdir="/srv")
    -> JobSpec(argv=("python", "t.py"), name="python", workdir="/srv", gpus=1, gpu_mem_mib=8192)

Sizes are limited here, at submit, with one line each: a command line the kernel would refuse
at exec (E2BIG) must fail now, not at launch, and a 50 MiB argv must not ride in every list.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields

from gpuyard.domain.dependency import parse_dependency
from gpuyard.domain.errors import InvalidRequest
from gpuyard.domain.job import (
    DISTRIBUTED_MODES,
    JOB_KINDS,
    NOTIFY_EVENTS,
    WARN_TARGETS,
    JobSpec,
)
from gpuyard.domain.job_names import MAX_NAME_CHARS as MAX_NAME_CHARS  # re-exported
from gpuyard.domain.job_names import default_name as default_name  # re-exported
from gpuyard.domain.retry import MAX_RETRIES, check_retry_on
from gpuyard.domain.signals import SIGTERM, parse_signal

KIB = 1024
# The kernel's MAX_ARG_STRLEN (32 pages): no one argument or environment string may be longer,
# the terminating NUL included.
MAX_ARG_BYTES = 128 * KIB - 1
# The whole command line: well under ARG_MAX (a quarter of the stack limit, 2 MiB by default),
# which argv, the environment and the server's own variables share at exec.
MAX_ARGV_BYTES = 128 * KIB
MAX_ENV_BYTES = 256 * KIB
MAX_ENV_VARS = 4096
MAX_WORKDIR_BYTES = 4095  # PATH_MAX, NUL excluded
# A copied script rides with the job (its record, the book): sbatch's scripts are small, and a
# large program belongs in the working directory, run by a small script.
MAX_SCRIPT_BYTES = 1024 * KIB


@dataclass(frozen=True, slots=True)
class SpecDraft:
    """A submission as a front door received it: units parsed, defaults not decided yet
    (`None`: the submitter did not say). Its fields are JobSpec's, by name."""

    argv: tuple[str, ...]
    name: str | None = None
    workdir: str | None = None  # the client's cwd when it sends one; None: the server decides
    gpus: int = 0  # 0 with gpu_mem_mib: one GPU (gpu_mem_mib is per GPU)
    cpus: int = 1
    mem_mib: int = 0
    time_limit_s: int | None = None
    priority: int = 0
    env: tuple[tuple[str, str], ...] = ()
    preemptible: bool | None = None  # None: the server's default (`--preemptible-default`)
    distributed: str | None = None
    gpu_mem_mib: int = 0
    nodes: int = 1
    stop_signal: int = SIGTERM
    script: str | None = None
    script_index: int = 0
    retries: int = 0
    retry_on: tuple[str, ...] = ()
    warn_signal: int = 0  # 0: none
    warn_before_s: int = 0
    warn_target: str = "all"
    output_path: str | None = None
    error_path: str | None = None
    ntasks_per_node: int = 1
    ntasks_given: bool = False
    gpus_per_task: int = 0
    dependency: str = ""
    array_max_running: int = 0
    array: str = ""
    kind: str = "batch"
    service_port: int = 0
    health_path: str = ""
    health_grace_s: int = 60
    python: str | None = None
    venv: str | None = None
    container: str | None = None
    notify: tuple[str, ...] = ()
    notify_events: tuple[str, ...] = ()
    gpu_type: str = ""
    hold: bool = False


_SPEC_FIELDS = tuple(f.name for f in fields(JobSpec))


def decide_spec(
    draft: SpecDraft, *, default_workdir: str, default_preemptible: bool = False
) -> JobSpec:
    """The valid JobSpec for `draft`, defaults decided; raises InvalidRequest naming the field.

    `default_workdir` is the server's choice when the submitter sent no working directory;
    `default_preemptible` its choice when the submitter did not say (preemption is opt-in: a
    job that does not checkpoint loses its work when preempted, so the admin decides).
    """
    check_sizes(draft)
    check_text(draft)
    check_script(draft)
    check_resources(draft)
    parse_signal(draft.stop_signal)
    check_warning(draft)
    check_workflow(draft)
    decided = {
        "retry_on": check_retry_on(draft.retry_on, draft.retries),
        "name": draft.name or default_name(draft.argv),
        "workdir": draft.workdir or default_workdir,
        "gpus": default_gpus(draft),
        "preemptible": default_preemptible if draft.preemptible is None else draft.preemptible,
    }
    spec = JobSpec(**{f: decided.get(f, getattr(draft, f)) for f in _SPEC_FIELDS})  # type: ignore[arg-type]
    check_shape(spec)
    return spec


def check_warning(draft: SpecDraft) -> None:
    """`--signal SIG@SECONDS`: a signal that can stop a job, sent before a time limit the job
    has, early enough to mean something, to processes of the job it can name."""
    if draft.warn_target not in WARN_TARGETS:
        raise InvalidRequest(
            f"warn_target {draft.warn_target!r}: give one of {', '.join(WARN_TARGETS)}",
            field="warn_target",
        )
    if not draft.warn_signal and not draft.warn_before_s:
        return
    if not draft.warn_signal or draft.warn_before_s <= 0:
        raise InvalidRequest(
            "warn_signal and warn_before_s go together: e.g. --signal USR1@120 sends USR1 "
            "120 s before the time limit",
            field="warn_signal",
        )
    parse_signal(draft.warn_signal, field="warn_signal")
    if draft.time_limit_s is None:
        raise InvalidRequest(
            "--signal SIG@SECONDS warns before the time limit, and this job has none: "
            "give --time too",
            field="warn_signal",
        )
    if draft.warn_before_s >= draft.time_limit_s:
        raise InvalidRequest(
            f"--signal SIG@{draft.warn_before_s} (warn_before_s): {draft.warn_before_s} s "
            f"before the time limit ({draft.time_limit_s} s) is its start; give a shorter "
            "@SECONDS or a longer --time",
            field="warn_before_s",
        )


MAX_NOTIFY_URLS = 8
MAX_URL_CHARS = 2048
MAX_GPU_TYPE_CHARS = 64
MAX_DEPENDENCY_CHARS = 4096


def check_workflow(draft: SpecDraft) -> None:
    """The workflow fields' shapes: paths, kinds, ports, URLs. What they refer to (a job a
    dependency names, an interpreter on the server) is checked where it is known."""
    for name in ("output_path", "error_path", "python", "venv", "container"):
        value = getattr(draft, name)
        if value is None:
            continue
        if not value or "\0" in value or _bytes(value) > MAX_WORKDIR_BYTES:
            raise InvalidRequest(
                f"{name}: give a non-empty path without NUL bytes, at most "
                f"{MAX_WORKDIR_BYTES:,} bytes",
                field=name,
            )
    for name in ("python", "venv"):
        value = getattr(draft, name)
        if value is not None and not os.path.isabs(value):
            raise InvalidRequest(f"{name} {value!r} must be an absolute path", field=name)
    if sum(v is not None for v in (draft.python, draft.venv, draft.container)) > 1:
        raise InvalidRequest(
            "--python, --venv and --container each choose the job's environment: give one",
            field="python",
        )
    if draft.ntasks_per_node < 1:
        raise InvalidRequest(
            f"ntasks_per_node must be at least 1, not {draft.ntasks_per_node}",
            field="ntasks_per_node",
        )
    if draft.array_max_running < 0:
        raise InvalidRequest("an array's %N cap must be positive", field="array")
    if draft.kind not in JOB_KINDS:
        raise InvalidRequest(
            f"kind {draft.kind!r}: use one of {', '.join(JOB_KINDS)}", field="kind"
        )
    if not 0 <= draft.service_port <= 65535:
        raise InvalidRequest(
            f"service_port {draft.service_port} is not a TCP port (1-65535)", field="service_port"
        )
    if (draft.service_port or draft.health_path) and draft.kind != "service":
        raise InvalidRequest(
            'service_port and health_path belong to a service: `gpuyard serve`, or kind "service"',
            field="service_port",
        )
    if not 0 <= draft.health_grace_s <= 86_400:
        raise InvalidRequest(
            f"health_grace_s {draft.health_grace_s}: give 0 to 86400 seconds (a day)",
            field="health_grace_s",
        )
    if draft.kind == "service" and draft.nodes != 1:
        raise InvalidRequest(
            "a service runs on one machine (its address is that machine's): give --nodes 1",
            field="nodes",
        )
    if draft.health_path and (not draft.health_path.startswith("/") or
                              not draft.health_path.isprintable()):  # fmt: skip
        raise InvalidRequest(
            f"health_path {draft.health_path[:64]!r} must be a URL path such as /health",
            field="health_path",
        )
    if len(draft.dependency) > MAX_DEPENDENCY_CHARS or not draft.dependency.isprintable():
        raise InvalidRequest(
            f"dependency: printable, at most {MAX_DEPENDENCY_CHARS:,} characters",
            field="dependency",
        )
    parse_dependency(draft.dependency)  # its syntax; the jobs it names: at submit
    if len(draft.gpu_type) > MAX_GPU_TYPE_CHARS or not draft.gpu_type.isprintable():
        raise InvalidRequest(
            f"gpu_type: a GPU model or vendor (e.g. a100, h100, mi300x), at most "
            f"{MAX_GPU_TYPE_CHARS} characters",
            field="gpu_type",
        )
    check_notify(draft.notify, draft.notify_events)


def check_notify(urls: tuple[str, ...], events: tuple[str, ...]) -> None:
    if len(urls) > MAX_NOTIFY_URLS:
        raise InvalidRequest(f"notify: at most {MAX_NOTIFY_URLS} URLs", field="notify")
    for url in urls:
        if (not url.startswith(("http://", "https://")) or len(url) > MAX_URL_CHARS
                or not url.isprintable() or " " in url):  # fmt: skip
            raise InvalidRequest(f"notify: {url[:80]!r} is not an http(s) URL", field="notify")
    unknown = [e for e in events if e not in NOTIFY_EVENTS]
    if unknown:
        raise InvalidRequest(
            f"notify_events: {', '.join(unknown)!s}: use {', '.join(NOTIFY_EVENTS)}",
            field="notify_events",
        )


def default_gpus(draft: SpecDraft) -> int:
    return implied_gpus(draft.gpus, shares_gpus=bool(draft.gpu_mem_mib))


def implied_gpus(gpus: int, *, shares_gpus: bool) -> int:
    """`--gpu-mem` is memory per GPU: without `--gpus` it means one GPU."""
    return gpus or (1 if shares_gpus else 0)


def check_sizes(draft: SpecDraft) -> None:
    """Refuse what exec would refuse (E2BIG) or what would bloat every listing."""
    if not draft.argv:
        raise InvalidRequest("command: nothing to run", field="command")
    total = 0
    for arg in draft.argv:
        size = _bytes(arg)
        if size > MAX_ARG_BYTES:
            raise InvalidRequest(
                f"command: an argument of {size:,} bytes is longer than the {MAX_ARG_BYTES:,} "
                "the kernel allows: pass large data in a file",
                field="command",
            )
        total += size + 1
    if total > MAX_ARGV_BYTES:
        raise InvalidRequest(
            f"command: {total:,} bytes of arguments, at most {MAX_ARGV_BYTES:,}: "
            "pass large data in a file",
            field="command",
        )
    if len(draft.env) > MAX_ENV_VARS:
        raise InvalidRequest(
            f"env: {len(draft.env):,} variables, at most {MAX_ENV_VARS:,}", field="env"
        )
    env_total = 0
    for key, value in draft.env:
        size = _bytes(key) + 1 + _bytes(value)
        if size > MAX_ARG_BYTES:
            raise InvalidRequest(
                f"env: {key[:64]} is {size:,} bytes, longer than the {MAX_ARG_BYTES:,} the "
                "kernel allows for one variable",
                field="env",
            )
        env_total += size + 1
    if env_total > MAX_ENV_BYTES:
        raise InvalidRequest(
            f"env: {env_total:,} bytes of variables, at most {MAX_ENV_BYTES:,}", field="env"
        )
    if draft.name is not None and len(draft.name) > MAX_NAME_CHARS:
        raise InvalidRequest(
            f"name: {len(draft.name):,} characters, at most {MAX_NAME_CHARS}", field="name"
        )
    if draft.workdir is not None and _bytes(draft.workdir) > MAX_WORKDIR_BYTES:
        raise InvalidRequest(
            f"workdir: longer than {MAX_WORKDIR_BYTES:,} bytes (PATH_MAX)", field="workdir"
        )


def check_text(draft: SpecDraft) -> None:
    """What exec and the environment cannot carry: NUL bytes, `=` in a name, a relative dir."""
    if not draft.argv[0].strip():
        raise InvalidRequest("command: the program to run is empty", field="command")
    if any("\0" in arg for arg in draft.argv):
        raise InvalidRequest("command: an argument contains a NUL byte", field="command")
    if draft.name is not None and not draft.name.isprintable():
        # A newline or an escape code would break `queue`'s rows and reach viewers' terminals.
        raise InvalidRequest(
            "name: contains a control character (newline, tab, escape, NUL): use printable "
            "characters",
            field="name",
        )
    for key, value in draft.env:
        if not key or "=" in key or "\0" in key:
            raise InvalidRequest(f"env: {key[:64]!r} is not a valid variable name", field="env")
        if "\0" in value:
            raise InvalidRequest(f"env: the value of {key} contains a NUL byte", field="env")
    if draft.workdir is not None:
        if "\0" in draft.workdir:
            raise InvalidRequest("workdir contains a NUL byte", field="workdir")
        if not os.path.isabs(draft.workdir):
            raise InvalidRequest(
                f"workdir {draft.workdir!r} must be an absolute path", field="workdir"
            )


def check_script(draft: SpecDraft) -> None:
    """A copied script: small enough to keep with the job, and in the slot of a path to run."""
    if draft.script is None:
        return
    size = _bytes(draft.script)
    if size > MAX_SCRIPT_BYTES:
        raise InvalidRequest(
            f"script: {size:,} bytes, at most {MAX_SCRIPT_BYTES:,}: keep large programs in the "
            "working directory and submit a small script that runs them",
            field="script",
        )
    if "\0" in draft.script:
        raise InvalidRequest("script: contains a NUL byte (not a text file)", field="script")
    if not 0 <= draft.script_index < len(draft.argv):
        raise InvalidRequest(
            f"script_index {draft.script_index}: not an argument of the command ("
            f"{len(draft.argv)})",
            field="script_index",
        )


def check_resources(draft: SpecDraft) -> None:
    """Counts in range, whatever the front door checked before."""
    for name, value, low in (("gpus", draft.gpus, 0), ("cpus", draft.cpus, 1),
                             ("nodes", draft.nodes, 1), ("mem", draft.mem_mib, 0),
                             ("gpu_mem", draft.gpu_mem_mib, 0),
                             ("gpus_per_task", draft.gpus_per_task, 0)):  # fmt: skip
        if value < low:
            raise InvalidRequest(f"{name} must be at least {low}, not {value}", field=name)
    if draft.time_limit_s is not None and draft.time_limit_s <= 0:
        raise InvalidRequest("time_limit must be positive", field="time_limit")
    if not 0 <= draft.retries <= MAX_RETRIES:
        raise InvalidRequest(
            f"retries must be from 0 to {MAX_RETRIES}, not {draft.retries}", field="retries"
        )
    if draft.distributed is not None and draft.distributed not in DISTRIBUTED_MODES:
        raise InvalidRequest(
            f"distributed {draft.distributed!r}: use one of {', '.join(DISTRIBUTED_MODES)}",
            field="distributed",
        )


def check_shape(spec: JobSpec) -> None:
    """How the GPUs, nodes and the distributed mode fit together (defaults decided)."""
    if spec.gpu_mem_mib and spec.nodes > 1:
        raise InvalidRequest(
            "--gpu-mem shares GPUs of one machine: it cannot be combined with --nodes",
            field="gpu_mem",
        )
    if spec.distributed and spec.gpus < 1:
        raise InvalidRequest(
            f"--distributed {spec.distributed} runs one process per GPU: ask for --gpus N",
            field="distributed",
        )
    if spec.nodes > 1 and (spec.gpus < spec.nodes or spec.gpus % spec.nodes):
        raise InvalidRequest(
            f"--nodes {spec.nodes} splits the job's GPUs evenly over the nodes: give "
            "--gpus-per-node G (or --gpus a multiple of --nodes)",
            field="nodes",
        )
    tasks = spec.ntasks_per_node * spec.nodes
    if spec.gpus_per_task and spec.gpus != spec.gpus_per_task * tasks:
        raise InvalidRequest(
            f"gpus_per_task {spec.gpus_per_task} x {tasks} tasks is {spec.gpus_per_task * tasks} "
            f"GPUs, but the job asks for {spec.gpus}: give --gpus-per-task with the tasks "
            "(-n, --ntasks-per-node) and no GPU count of its own",
            field="gpus_per_task",
        )
    if spec.nodes > 1 and spec.distributed == "tf":
        raise InvalidRequest(
            "--distributed tf over several nodes is not supported yet (TF_CONFIG needs every "
            "worker's address): use torchrun or jax, or one node",
            field="distributed",
        )


def _bytes(text: str) -> int:
    """Bytes at exec (UTF-8; a lone surrogate counted, never an error)."""
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))
