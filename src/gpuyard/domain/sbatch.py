"""sbatch's directives: the `#SBATCH` (and gpuyard's own `#GPUYARD`) lines at the top of a
batch script, read into option values, and those values turned into a submission's fields.

As sbatch does, directives are read from the lines after the `#!` up to the first line that
is neither blank nor a comment; several options may share a line (`#SBATCH -N 2 -t 1:00:00`),
with `--opt=VALUE`, `--opt VALUE`, `-oVALUE` or `-o VALUE`, quoted as in a shell, and `#`
starting a comment. A directive that means nothing here is one warning, never a failure; a
value that cannot mean what was written (`--time=soon`) is an error naming its line.

    found = parse_directives("#!/bin/bash\\n#SBATCH --gres=gpu:a100:2 -t 90\\n", "job.sh")
    found.values == {"gpus_per_node": 2, "gpu_type": "a100", "time": "90"}
    fields, notes = resolve(found.values)   # {"gpus": 2, "gpu_type": "a100", ...}

The values are keyed by what they mean (`gpus` total, `gpus_per_node`, `mem` per node...),
the same keys the CLI's own flags are read into, so that `merge(script, command_line)` lets a
flag replace what the script said, as sbatch's command line does (`MERGE_GROUPS`: a count
given one way replaces the script's same count given another way: `--gpus 2` replaces
`--gres=gpu:4`).

`#GPUYARD` lines take gpuyard's long options too (`--gpu-mem 20G`, `--retries 2`, `--python
PATH`, `--notify URL`, `--signal USR1` as the stop signal, as on the command line) and win over
`#SBATCH` lines. Standard library only.

One module over 500 lines because it is one thing: one table of sbatch's options (`_SLURM`,
`_GPUYARD`, `_IGNORED`), each with a small handler, read by one line reader and resolved by one
`resolve`. Split, a new option would touch several files, and `gpuyard submit`'s fast path
would import more of them.
"""

from __future__ import annotations

import math

from gpuyard.domain.errors import InvalidRequest

# No dataclasses, typing or shlex at import: `gpuyard submit`'s fast path resolves its flags
# here (a few ms matter there); shlex is imported when a script has directives.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    Act = Callable[["_Line", str], None]

SBATCH = "#SBATCH"
GPUYARD = "#GPUYARD"

# Options that say the same thing in different ways: a layer (the command line over the
# script, #GPUYARD over #SBATCH) that sets one of a group replaces the lower layer's whole group.
MERGE_GROUPS: tuple[frozenset[str], ...] = (
    frozenset({"gpus", "gpus_per_node", "gpus_per_task"}),
    frozenset({"mem", "mem_per_gpu", "mem_per_cpu", "mem_total"}),
    frozenset({"ntasks", "ntasks_per_node"}),
    frozenset({"cpus_per_task", "cpus_per_gpu", "cpus"}),
)
# Values that merge by variable name rather than being replaced.
_MERGED_LISTS = ("env",)


class DirectiveWarning:
    """A directive that means nothing here (or less than it says): its 1-based line."""

    __slots__ = ("line", "message")

    def __init__(self, line: int, message: str) -> None:
        self.line, self.message = line, message

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DirectiveWarning) and (self.line, self.message) == (
            other.line, other.message)  # fmt: skip

    def __repr__(self) -> str:
        return f"DirectiveWarning({self.line}, {self.message!r})"


class Directives:
    """What a script's directives asked for (`values`, keys as in the module's doc) and the
    warnings about those that mean nothing here."""

    __slots__ = ("values", "warnings")

    def __init__(self) -> None:
        self.values: dict[str, object] = {}
        self.warnings: list[DirectiveWarning] = []


# Accepted and ignored: what each means nothing of here, said once in the warning.
_ONE_QUEUE = "one queue per server here"
_IGNORED: dict[str, str] = {
    "partition": _ONE_QUEUE,
    "qos": "limits are per user and team here (gpuyard admin limit)",
    "account": "accounting is per user and team here",
    "wckey": "accounting is per user and team here",
    "reservation": "there are no reservations here",
    "exclusive": "GPUs are never shared unless a job asks for --gpu-mem",
    "oversubscribe": "GPUs are never shared unless a job asks for --gpu-mem",
    "constraint": "no node features here (a GPU model: --gres=gpu:TYPE:N or --gpu-type)",
    "cluster-constraint": "one cluster here",
    "clusters": "one cluster here",
    "nodelist": "nodes are chosen by the scheduler",
    "exclude": "nodes are chosen by the scheduler",
    "open-mode": "the -o/-e files are always appended to here",
    "comment": "no comments are stored",
    "licenses": "no licenses here",
    "begin": "a job starts as soon as it can (hold it: gpuyard hold JOB)",
    "deadline": "no deadlines here",
    "time-min": "the time limit is --time",
    "mincpus": "CPUs are --cpus-per-task",
    "sockets-per-node": "no CPU topology here",
    "cores-per-socket": "no CPU topology here",
    "threads-per-core": "no CPU topology here",
    "extra-node-info": "no CPU topology here",
    "hint": "no CPU topology here",
    "mem-bind": "no CPU topology here",
    "cpu-bind": "no CPU topology here",
    "distribution": "tasks are laid out by srun here",
    "ntasks-per-core": "no CPU topology here",
    "ntasks-per-socket": "no CPU topology here",
    "ntasks-per-gpu": "tasks are --ntasks-per-node",
    "gpu-freq": "GPU clocks are the admin's",
    "cpu-freq": "CPU clocks are the admin's",
    "gres-flags": "GPUs are placed by the scheduler",
    "core-spec": "no core specialisation here",
    "thread-spec": "no core specialisation here",
    "switches": "no network topology here",
    "network": "no network options here",
    "spread-job": "nodes are chosen by the scheduler",
    "use-min-nodes": "nodes are chosen by the scheduler",
    "propagate": "resource limits are the job's cgroup's",
    "get-user-env": "the environment is --export's",
    "profile": "GPU use is sampled anyway (gpuyard show)",
    "acctg-freq": "GPU use is sampled anyway (gpuyard show)",
    "kill-on-invalid-dep": "a job whose dependency can never be met stays pending "
    "(DependencyNeverSatisfied), as Slurm's default, until cancelled",
    "no-kill": "a job ends with its nodes",
    "overcommit": "CPUs are --cpus-per-task",
    "tmp": "no scratch space is reserved here",
    "mcs-label": "no MCS labels here",
    "power": "no power options here",
    "reboot": "nodes are not rebooted for jobs",
    "delay-boot": "nodes are not rebooted for jobs",
    "prefer": "no node features here",
    "x11": "no X11 forwarding in batch jobs",
    "input": "a batch job reads no standard input",
    "parsable": "a command-line flag (gpuyard sbatch --parsable)",
    "quiet": "nothing to quieten",
    "verbose": "nothing more to say",
    "uid": "jobs run as their owner",
    "gid": "jobs run as their owner",
    "export-file": "use --export or #GPUYARD --env",
    "ignore-pbs": "PBS directives are not read",
    "batch": "no node features here",
    "container": "an OCI bundle (Slurm's --container): gpuyard's is #GPUYARD --container IMAGE",
    "container-id": "an OCI bundle (Slurm's --container): gpuyard's is #GPUYARD --container IMAGE",
    "requeue-exit": "failures are retried with #GPUYARD --retries",
    "bb": "no burst buffers here",
    "bbf": "no burst buffers here",
}

# Short options -> their long names (sbatch's).
_SHORT = {
    "-A": "account", "-a": "array", "-B": "extra-node-info", "-b": "begin", "-C": "constraint",
    "-c": "cpus-per-task", "-D": "chdir", "-d": "dependency", "-e": "error", "-G": "gpus",
    "-H": "hold", "-i": "input", "-J": "job-name", "-k": "no-kill", "-L": "licenses",
    "-M": "clusters", "-m": "distribution", "-N": "nodes", "-n": "ntasks", "-O": "overcommit",
    "-o": "output", "-p": "partition", "-q": "qos", "-Q": "quiet", "-S": "core-spec",
    "-s": "oversubscribe", "-t": "time", "-v": "verbose", "-W": "wait", "-w": "nodelist",
    "-x": "exclude",
}  # fmt: skip
# Ignored options that take no value (the others take one: `--partition gpu`).
_IGNORED_FLAGS = frozenset({
    "exclusive", "oversubscribe", "no-kill", "overcommit", "spread-job",
    "use-min-nodes", "reboot", "x11", "parsable", "quiet", "verbose",
    "get-user-env", "ignore-pbs", "kill-on-invalid-dep", "requeue-hold",
})  # fmt: skip
# Ignored options whose value is optional (`--exclusive` or `--exclusive=user`): only a value
# joined by `=` is theirs.
_OPTIONAL_VALUE = frozenset({"exclusive", "get-user-env", "kill-on-invalid-dep", "propagate",
                             "no-kill", "nice", "x11", "profile", "oversubscribe"})  # fmt: skip


class _Line:
    """One directive line being read: where warnings go, with its number."""

    def __init__(self, number: int, source: str, found: Directives) -> None:
        self.number, self.source, self.found = number, source, found

    def warn(self, message: str) -> None:
        self.found.warnings.append(DirectiveWarning(self.number, message))

    def bad(self, option: str, value: str, why: str) -> InvalidRequest:
        if not self.number:  # a command-line flag (read_option)
            return InvalidRequest(f"{option} {value!r}: {why}")
        return InvalidRequest(f"{self.source}:{self.number}: {option}={value}: {why}")

    def set(self, key: str, value: object) -> None:
        values = self.found.values
        if key in _MERGED_LISTS:
            values[key] = (*_tuple(values.get(key)), *_tuple(value))
        else:
            values[key] = value


def _tuple(value: object) -> tuple[str, ...]:
    return tuple(value) if isinstance(value, tuple) else ()


def parse_directives(text: str, source: str = "script") -> Directives:
    """The directives of a script's text; `source` (its path as typed) names it in errors.
    Raises InvalidRequest for a value that cannot mean what it says."""
    found = Directives()
    gpuyard = Directives()
    hetjob = False  # a heterogeneous job's later components are not read
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if number == 1 and line.startswith("#!"):
            continue
        if not line:
            continue
        if not line.startswith("#"):
            break  # the first command: sbatch reads no directive after it
        for prefix, into, dialect in ((SBATCH, found, "sbatch"), (GPUYARD, gpuyard, "gpuyard")):
            if not line.startswith(prefix) or (len(line) > len(prefix) and
                                               not line[len(prefix)].isspace()):  # fmt: skip
                continue
            rest = line[len(prefix) :]
            if prefix == SBATCH and rest.split("#")[0].strip() in ("hetjob", "packjob"):
                if not hetjob:
                    message = "a heterogeneous job: only its first component's directives are read"
                    found.warnings.append(DirectiveWarning(number, message))
                hetjob = True
            elif not (hetjob and prefix == SBATCH):
                _read_line(rest, _Line(number, source, into), dialect)
    # #GPUYARD lines win over #SBATCH lines, whatever their order.
    found.values = merge(found.values, gpuyard.values)
    found.warnings = sorted([*found.warnings, *gpuyard.warnings], key=lambda w: w.line)
    return found


def _read_line(rest: str, line: _Line, dialect: str) -> None:
    import shlex

    try:
        words = shlex.split(rest, comments=True)
    except ValueError as exc:
        line.warn(f"cannot read this directive ({exc}): ignored")
        return
    i = 0
    while i < len(words):
        word = words[i]
        i += 1
        if word.startswith("--") and len(word) > 2:
            name, eq, value = word[2:].partition("=")
            inline: str | None = value if eq else None
        elif word.startswith("-") and len(word) >= 2 and word[:2] in _SHORT:
            name = _SHORT[word[:2]]
            inline = word[2:] or None
            if inline is not None and inline.startswith("="):
                inline = inline[1:]
        else:
            line.warn(f"{word!r} is not an option: ignored")
            continue
        handler = _handler(name, dialect)
        shown = f"--{name}" if word.startswith("--") else word[:2]
        if handler is None:
            used, message = _unused(name, shown, inline, words[i] if i < len(words) else None)
            i += used - 1
            line.warn(message)
            continue
        takes, act = handler
        if takes == "none":
            if inline is not None:
                raise line.bad(shown, inline, "takes no value")
            act(line, "")
            continue
        if inline is None and takes == "optional":
            act(line, "")
            continue
        if inline is None:
            if i >= len(words):
                raise InvalidRequest(f"{line.source}:{line.number}: {shown} needs a value")
            inline = words[i]
            i += 1
        act(line, inline)


def _unused(name: str, shown: str, inline: str | None, after: str | None) -> tuple[int, str]:
    """An option that means nothing here: the words it takes (itself, and its value when
    that is the next word) and its warning."""
    used, value = 1, inline
    takes_next = name not in _IGNORED_FLAGS and name not in _OPTIONAL_VALUE
    if inline is None and takes_next and after is not None and not after.startswith("-"):
        used, value = 2, after
    joint = "=" if shown.startswith("--") else " "
    said = shown.partition("=")[0] + (f"{joint}{value}" if value else "")
    if name in _IGNORED:
        return used, f"{said} ignored: {_IGNORED[name]}"
    return used, f"unknown option {said}: ignored"


def ignored_option(word: str, after: str | None) -> tuple[int, str] | None:
    """A command-line word that is one of sbatch's options gpuyard accepts and ignores
    (`-p gpu`, `--qos=high`): the words it takes and its warning; None for anything else."""
    if word.startswith("--"):
        name, eq, value = word[2:].partition("=")
        inline: str | None = value if eq else None
        shown = word
    elif word[:2] in _SHORT:
        name, shown = _SHORT[word[:2]], word[:2]
        inline = word[2:].removeprefix("=") or None
    else:
        return None
    if name not in _IGNORED:
        return None
    return _unused(name, shown, inline, after)


# -- the options that mean something here ------------------------------------------------


def _count(key: str, option: str, low: int = 1) -> Act:
    def act(line: _Line, value: str) -> None:
        line.set(key, _int(line, option, value, low))

    return act


def _int(line: _Line, option: str, value: str, low: int = 1) -> int:
    text = value.strip()
    if not text.lstrip("-").isdigit() or int(text) < low:
        raise line.bad(option, value, f"give a whole number of at least {low}")
    return int(text)


def _typed_count(key: str, option: str) -> Act:
    """`N` or `TYPE:N` (`--gpus=a100:4`); a bare `TYPE` is one of it."""

    def act(line: _Line, value: str) -> None:
        kind, count = _gpu_type_count(line, option, value)
        line.set(key, count)
        if kind:
            line.set("gpu_type", kind)

    return act


def _gpu_type_count(line: _Line, option: str, value: str) -> tuple[str, int]:
    kind, sep, count = value.strip().rpartition(":")
    if not sep:
        kind, count = ("", value.strip()) if value.strip().isdigit() else (value.strip(), "1")
    if not count.isdigit() or int(count) < 0 or (sep and not kind) or ":" in kind:
        raise line.bad(option, value, "give N or TYPE:N GPUs, e.g. 4 or a100:4")
    return kind, int(count)


def _gres(line: _Line, value: str) -> None:
    """`gpu`, `gpu:N`, `gpu:TYPE:N` per node, among other generic resources (ignored)."""
    for item in value.split(","):
        parts = item.strip().split(":")
        name = parts[0].split("/")[-1]  # gres/gpu:2, as sacct writes it
        if name != "gpu":
            line.warn(f"--gres={item.strip()} ignored: GPUs are the only generic resource here")
            continue
        rest = parts[1:]
        if not rest:
            kind, count = "", 1
        elif len(rest) == 1:
            kind, count = ("", int(rest[0])) if rest[0].isdigit() else (rest[0], 1)
        elif len(rest) == 2 and rest[1].isdigit():
            kind, count = rest[0], int(rest[1])
        else:
            raise line.bad("--gres", value, "give gpu:N or gpu:TYPE:N (GPUs per node)")
        line.set("gpus_per_node", count)
        if kind:
            line.set("gpu_type", kind)


def _nodes(line: _Line, value: str) -> None:
    low, dash, high = value.strip().partition("-")
    if dash:
        if not (low.isdigit() and high.isdigit()):
            raise line.bad("--nodes", value, "give N or MIN-MAX")
        line.warn(f"--nodes={value}: a range; the job takes {low} (its least)")
    line.set("nodes", _int(line, "--nodes", low))


def _size(key: str, option: str) -> Act:
    def act(line: _Line, value: str) -> None:
        from gpuyard.domain.units import parse_size_mib

        try:
            parse_size_mib(value, field=key)
        except InvalidRequest as exc:
            raise line.bad(option, value, exc.message) from None
        line.set(key, value.strip())

    return act


def _time(line: _Line, value: str) -> None:
    from gpuyard.domain.units import parse_duration_s

    text = value.strip()
    if text.upper() in ("UNLIMITED", "INFINITE"):
        line.found.values.pop("time", None)  # no limit: as if none was given
        return
    try:
        parse_duration_s(text)
    except InvalidRequest as exc:
        raise line.bad("--time", value, exc.message) from None
    line.set("time", text)


def _text(key: str) -> Act:
    def act(line: _Line, value: str) -> None:
        line.set(key, value)

    return act


def _array(line: _Line, value: str) -> None:
    from gpuyard.domain.arrays import parse_array

    try:
        parse_array(value)
    except InvalidRequest as exc:
        raise line.bad("--array", value, exc.message) from None
    line.set("array", value.strip())


def _slurm_signal(line: _Line, value: str) -> None:
    """Slurm's `--signal=[{R|B}:]SIG[@TIME]`: SIG TIME seconds (default 60) before the time
    limit. As Slurm: without `B:` every process of the job but the batch shell gets it (the
    programs the script runs, srun's tasks: a `#!/bin/bash` script without a trap survives);
    with `B:` the batch shell alone (its `trap`)."""
    text = value.strip()
    target = "steps"
    where, colon, rest = text.partition(":")
    if colon and where.upper() in ("B", "R", "RB", "BR"):
        text = rest
        if "B" in where.upper():
            target = "batch"
    name, _, seconds = text.partition("@")
    seconds = seconds or "60"
    if not seconds.isdigit() or int(seconds) < 1:
        raise line.bad("--signal", value, "give [B:]SIG[@SECONDS], e.g. B:USR1@120")
    from gpuyard.domain.signals import parse_signal

    try:
        parse_signal(name, field="signal")
    except InvalidRequest as exc:
        raise line.bad("--signal", value, exc.message) from None
    line.set("warn_signal", name)
    line.set("warn_before_s", int(seconds))
    line.set("warn_target", target)


# srun's `--gpu-bind` values (adapters/executor/srun.sh applies them): a GPU list's items are
# `ID` or `ID*COUNT` (map_gpu: indices; mask_gpu: hex masks).
_GPU_BIND_WORDS = ("none", "closest")
_GPU_BIND_COUNTS = ("single", "per_task")
_GPU_BIND_LISTS = {"map_gpu": "0123456789", "mask_gpu": "0123456789abcdefABCDEFxX"}


def _gpu_bind(line: _Line, value: str) -> None:
    """sbatch's `--gpu-bind`: not applied to the batch step (as Slurm's), but given to every
    srun step of the job through SLURM_GPU_BIND, the variable sbatch sets for it."""
    text = value.strip()
    kind, _, arg = text.removeprefix("verbose,").partition(":")
    if kind in _GPU_BIND_WORDS and not arg:
        ok = True
    elif kind in _GPU_BIND_COUNTS:
        ok = arg.isdigit() and int(arg) >= 1
    elif kind in _GPU_BIND_LISTS:
        items = [i.partition("*") for i in arg.split(",")]
        digits = _GPU_BIND_LISTS[kind]
        ok = all(i and all(c in digits for c in i) and (not star or n.isdigit())
                 for i, star, n in items)  # fmt: skip
    else:
        ok = False
    if not ok:
        why = "give [verbose,]none|closest|single:N|per_task:N|map_gpu:LIST|mask_gpu:LIST"
        raise line.bad("--gpu-bind", value, why)
    line.set("env", (f"SLURM_GPU_BIND={text}",))


def _gpuyard_signal(line: _Line, value: str) -> None:
    """gpuyard's `--signal`: SIG is the stop signal; SIG@SECONDS the warning before the limit."""
    name, at, seconds = value.strip().partition("@")
    if at:
        from gpuyard.domain.signals import parse_warning

        try:
            parse_warning(value)
        except InvalidRequest as exc:
            raise line.bad("--signal", value, exc.message) from None
        line.set("warn_signal", name)
        line.set("warn_before_s", int(seconds))
        line.set("warn_target", "all")
        return
    from gpuyard.domain.signals import parse_signal

    try:
        parse_signal(name)
    except InvalidRequest as exc:
        raise line.bad("--signal", value, exc.message) from None
    line.set("stop_signal", name)


def _flag(key: str, value: object) -> Act:
    def act(line: _Line, _value: str) -> None:
        line.set(key, value)

    return act


def _mail_type(line: _Line, value: str) -> None:
    from gpuyard.domain.notify import events_from_mail_type

    try:
        line.set("notify_events", events_from_mail_type(value))
    except InvalidRequest as exc:
        raise line.bad("--mail-type", value, exc.message) from None


def _mail_user(line: _Line, value: str) -> None:
    if value.startswith(("http://", "https://")):
        line.set("notify", (value,))
        return
    line.warn(
        f"--mail-user={value}: gpuyard sends no mail; --mail-type's events go to webhooks "
        "(--notify URL, or #GPUYARD --notify URL)"
    )


def _notify(line: _Line, value: str) -> None:
    current = line.found.values.get("notify")
    line.set("notify", (*_tuple(current), value))


def _export(line: _Line, value: str) -> None:
    parse_export(value, lambda why: line.bad("--export", value, why))
    line.set("export", value)


def _env(line: _Line, value: str) -> None:
    key, eq, _ = value.partition("=")
    if not eq or not key:
        raise line.bad("--env", value, "use KEY=VALUE")
    line.set("env", (value,))


def _nice(line: _Line, value: str) -> None:
    """`--nice[=N]` lowers the job's priority by N (100 without a value)."""
    adjust = _int(line, "--nice", value or "100", low=-2_000_000)
    line.set("priority", -adjust)


def _requeue(flag: bool) -> Act:
    """Slurm requeues a `--requeue` job after a node failure or a preemption: here that is a
    preemptible job (node failures are requeued anyway); `--no-requeue` is never preempted."""

    def act(line: _Line, _value: str) -> None:
        line.set("preemptible", flag)

    return act


def _distributed(line: _Line, value: str) -> None:
    line.set("distributed", value)


_SLURM: dict[str, tuple[str, Act]] = {
    "gres": ("value", _gres),
    "gpus": ("value", _typed_count("gpus", "--gpus")),
    "gpus-per-node": ("value", _typed_count("gpus_per_node", "--gpus-per-node")),
    "gpus-per-task": ("value", _typed_count("gpus_per_task", "--gpus-per-task")),
    "gpu-bind": ("value", _gpu_bind),
    "nodes": ("value", _nodes),
    "ntasks": ("value", _count("ntasks", "--ntasks")),
    "ntasks-per-node": ("value", _count("ntasks_per_node", "--ntasks-per-node")),
    "cpus-per-task": ("value", _count("cpus_per_task", "--cpus-per-task")),
    "cpus-per-gpu": ("value", _count("cpus_per_gpu", "--cpus-per-gpu")),
    "mem": ("value", _size("mem", "--mem")),
    "mem-per-gpu": ("value", _size("mem_per_gpu", "--mem-per-gpu")),
    "mem-per-cpu": ("value", _size("mem_per_cpu", "--mem-per-cpu")),
    "time": ("value", _time),
    "job-name": ("value", _text("name")),
    "output": ("value", _text("output")),
    "error": ("value", _text("error")),
    "chdir": ("value", _text("chdir")),
    "workdir": ("value", _text("chdir")),  # sbatch's old name of --chdir
    "array": ("value", _array),
    "dependency": ("value", _text("dependency")),
    "signal": ("value", _slurm_signal),
    "requeue": ("none", _requeue(True)),
    "no-requeue": ("none", _requeue(False)),
    "export": ("value", _export),
    "mail-type": ("value", _mail_type),
    "mail-user": ("value", _mail_user),
    "nice": ("optional", _nice),
    "priority": ("value", _count("priority", "--priority", low=-1_000_000)),
    # Submitted held, released by `gpuyard release` (scontrol release).
    "hold": ("none", _flag("hold", True)),
    # What `gpuyard sbatch` does after the submit (Resolved.wait, .test_only): block until the
    # job ends and exit with its code; only say when it would start, queueing nothing.
    "wait": ("none", _flag("wait", True)),
    "test-only": ("none", _flag("test_only", True)),
}
# #GPUYARD lines: gpuyard's own long options, with the command line's meanings.
_GPUYARD: dict[str, tuple[str, Act]] = {
    **_SLURM,
    # gpuyard's --cpus and --mem are the job's in all (split over its nodes), as on the
    # command line; sbatch's --cpus-per-task and --mem are per task and per node.
    "cpus": ("value", _count("cpus", "--cpus")),
    "mem": ("value", _size("mem_total", "--mem")),
    "name": ("value", _text("name")),
    "workdir": ("value", _text("chdir")),
    "env": ("value", _env),
    "export-env": ("none", _flag("export_env", True)),
    "no-export-env": ("none", _flag("export_env", False)),
    "preemptible": ("none", _flag("preemptible", True)),
    "no-preempt": ("none", _flag("preemptible", False)),
    "signal": ("value", _gpuyard_signal),
    "retries": ("value", _count("retries", "--retries", low=0)),
    "retry-on": ("value", _text("retry_on")),
    "distributed": ("value", _distributed),
    "gpu-mem": ("value", _size("gpu_mem", "--gpu-mem")),
    "notify": ("value", _notify),
    "python": ("value", _text("python")),
    "venv": ("value", _text("venv")),
    "container": ("value", _text("container")),
    "gpu-type": ("value", _text("gpu_type")),
}


def read_option(name: str, value: str, dialect: str = "gpuyard") -> dict[str, object]:
    """The values one command-line flag sets (`read_option("gres", "gpu:a100:2")`), read as
    the directive of the same name is; raises InvalidRequest naming the flag."""
    found = Directives()
    handler = _handler(name, dialect)
    if handler is None:
        raise InvalidRequest(f"--{name}: not an option of submit")
    handler[1](_Line(0, "", found), value)
    return found.values


def sbatch_hint(option: str) -> str | None:
    """For a submit option that does not exist but is sbatch's: where it is taken (a script's
    directive, `gpuyard sbatch`) or why it means nothing here; None for any other."""
    name = option[2:] if option.startswith("--") else _SHORT.get(option[:2], "")
    if name in _IGNORED:
        return f"sbatch's, which means nothing here: {_IGNORED[name]}; gpuyard sbatch ignores it"
    if name in _SLURM:
        return f"sbatch's: give it as #SBATCH {option} in the script, or use gpuyard sbatch"
    return None


def sbatch_option(word: str, after: str | None) -> tuple[int, dict[str, object]] | None:
    """A command-line word that is one of sbatch's options with a meaning here (`-n 4`,
    `--gpus-per-task=1`, `--nice`): the words it takes and the values it sets, read as its
    directive is; None for anything else."""
    if word.startswith("--"):
        name, eq, value = word[2:].partition("=")
        inline: str | None = value if eq else None
    elif word[:2] in _SHORT:
        name, inline = _SHORT[word[:2]], word[2:].removeprefix("=") or None
    else:
        return None
    handler = _SLURM.get(name)
    if handler is None:
        return None
    takes, act = handler
    used = 1
    if inline is None and takes == "value":
        if after is None:
            raise InvalidRequest(f"{word} needs a value")
        inline, used = after, 2
    found = Directives()
    act(_Line(0, "", found), inline or "")
    return used, found.values


def _handler(name: str, dialect: str) -> tuple[str, Act] | None:
    return (_GPUYARD if dialect == "gpuyard" else _SLURM).get(name)


# -- merging layers and resolving values into fields ------------------------------------


def merge(lower: dict[str, object], upper: dict[str, object]) -> dict[str, object]:
    """`upper`'s values over `lower`'s: each key replaced, each MERGE_GROUPS group replaced as
    a whole, `env` merged by variable name (upper's last)."""
    merged = dict(lower)
    for group in MERGE_GROUPS:
        if group & upper.keys():
            for key in group:
                merged.pop(key, None)
    for key, value in upper.items():
        if key in _MERGED_LISTS:
            merged[key] = (*_tuple(merged.get(key)), *_tuple(value))
        else:
            merged[key] = value
    return merged


def parse_export(text: str, bad: Callable[[str], Exception] | None = None
                 ) -> tuple[str, tuple[str, ...]]:  # fmt: skip
    """sbatch's `--export`: ("all" | "none", the variables named: `NAME` or `NAME=value`).
    `ALL` (sbatch's default) passes the whole submitting environment; `NONE`, or a list
    without `ALL`, only the variables it names."""
    mode = "none"
    names: list[str] = []
    for item in (i.strip() for i in text.split(",")):
        if item.upper() == "ALL":
            mode = "all"
        elif item.upper() == "NONE":
            continue
        elif item and item.partition("=")[0].replace("_", "a").isalnum():
            names.append(item)
        else:
            why = f"{item!r} is not NAME or NAME=VALUE (ALL, NONE or a list of them)"
            raise (bad or (lambda w: InvalidRequest(f"--export {text!r}: {w}")))(why)
    return mode, tuple(names)


class Resolved:
    """What the merged values ask for, as the submission's fields (JobSubmitIn's names), plus
    what the CLI finishes: the working directory (`chdir`, relative to the submit dir) and the
    environment (`export`: ("default" | "all" | "none", names), `env`: K=V pairs); `notes`:
    warnings without a line of their own."""

    __slots__ = ("chdir", "env", "export", "fields", "notes", "test_only", "wait")

    def __init__(self) -> None:
        self.fields: dict[str, object] = {}
        self.wait = False  # sbatch's --wait: block until the job ends, exit with its code
        self.test_only = False  # sbatch's --test-only: when it would start; nothing queued
        self.chdir: str | None = None
        self.export: tuple[str, tuple[str, ...]] = ("default", ())
        self.env: tuple[str, ...] = ()
        self.notes: list[str] = []


def resolve(values: dict[str, object]) -> Resolved:
    """The submission's fields for `values`; raises InvalidRequest where they disagree.

    Slurm's counts are per node or per task; gpuyard's `gpus`, `cpus` and `mem` are the job's
    totals (split evenly over its nodes): gpus = per node x nodes, cpus = cpus per task x tasks
    per node x nodes (or cpus per GPU x GPUs), mem = per node x nodes (or per GPU x GPUs, per
    CPU x CPUs)."""
    v = values
    out = Resolved()
    f = out.fields
    nodes = _get_int(v, "nodes", 1)
    tasks = _tasks_per_node(v, nodes, out.notes)
    per_node = _gpus_per_node(v, nodes, tasks)
    gpus = per_node * nodes if per_node is not None else None
    if "gpus" in v:
        gpus = _get_int(v, "gpus", 0)
        if per_node is not None and gpus != per_node * nodes:
            raise InvalidRequest(
                f"--gpus {gpus} and {per_node} GPUs per node x {nodes} nodes disagree: give one "
                "of them"
            )
    f["gpus"] = gpus or 0
    if "nodes" in v:
        f["nodes"] = nodes
    if tasks != 1 or "ntasks_per_node" in v or "ntasks" in v:
        f["ntasks_per_node"] = tasks
    if "ntasks_per_node" in v or "ntasks" in v:
        f["ntasks_given"] = True
    if _get_int(v, "gpus_per_task", 0):
        f["gpus_per_task"] = _get_int(v, "gpus_per_task", 0)
    node_gpus = (gpus or 0) // nodes if nodes else 0
    cpus_per_node = tasks * _get_int(v, "cpus_per_task", 1)
    if "cpus_per_gpu" in v:
        cpus_per_node = max(1, _get_int(v, "cpus_per_gpu", 1) * max(node_gpus, 1))
    f["cpus"] = cpus_per_node * nodes
    mem = _mem_per_node(v, node_gpus, cpus_per_node)
    if "cpus" in v:  # gpuyard's --cpus: the job's cores in all
        f["cpus"] = _get_int(v, "cpus", 1)
    if v.get("mem_total") is not None:  # gpuyard's --mem: the job's memory in all
        f["mem"] = v["mem_total"]
    elif mem is not None:
        f["mem"] = mem if nodes == 1 and isinstance(mem, str) else f"{_mib(mem) * nodes}M"
    f["priority"] = _get_int(v, "priority", 0)
    for key, name in (("time", "time_limit"), ("name", "name"), ("output", "output_path"),
                      ("error", "error_path"), ("array", "array"), ("dependency", "dependency"),
                      ("gpu_type", "gpu_type"), ("python", "python"), ("venv", "venv"),
                      ("container", "container"), ("gpu_mem", "gpu_mem"),
                      ("distributed", "distributed"), ("stop_signal", "stop_signal"),
                      ("preemptible", "preemptible")):  # fmt: skip
        if v.get(key) is not None:
            f[name] = v[key]
    if v.get("warn_signal") is not None:
        if "time" in v:
            f["warn_signal"] = v["warn_signal"]
            f["warn_before_s"] = v["warn_before_s"]
            if v.get("warn_target", "all") != "all":
                f["warn_target"] = v["warn_target"]
        else:
            out.notes.append(
                f"--signal={v['warn_signal']}@{v['warn_before_s']}: the job has no time limit "
                "to warn before (give --time): no warning will be sent"
            )
    if v.get("hold"):
        f["hold"] = True
    out.wait, out.test_only = bool(v.get("wait")), bool(v.get("test_only"))
    if v.get("retries"):
        f["retries"] = v["retries"]
    if v.get("retry_on") is not None:
        f["retry_on"] = [c.strip() for c in str(v["retry_on"]).split(",") if c.strip()]
    if v.get("notify"):
        f["notify"] = list(_tuple(v["notify"]))
    if v.get("notify_events") is not None:
        f["notify_events"] = list(_tuple(v["notify_events"]))
    out.chdir = str(v["chdir"]) if v.get("chdir") else None
    if v.get("export") is not None:
        out.export = parse_export(str(v["export"]))
    elif v.get("export_env") is False:
        out.export = ("none", ())
    out.env = _tuple(v.get("env"))
    return out


def _get_int(values: dict[str, object], key: str, default: int) -> int:
    value = values.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _tasks_per_node(v: dict[str, object], nodes: int, notes: list[str]) -> int:
    if "ntasks_per_node" in v:
        return _get_int(v, "ntasks_per_node", 1)
    if "ntasks" in v:
        ntasks = _get_int(v, "ntasks", 1)
        each = math.ceil(ntasks / nodes)
        if each * nodes != ntasks:
            notes.append(
                f"--ntasks={ntasks} over {nodes} nodes does not split evenly: {each} tasks on "
                f"each node ({each * nodes} in all)"
            )
        return each
    return 1


def _gpus_per_node(v: dict[str, object], nodes: int, tasks: int) -> int | None:
    if "gpus_per_node" in v:
        return _get_int(v, "gpus_per_node", 0)
    if "gpus_per_task" in v:
        return _get_int(v, "gpus_per_task", 0) * tasks
    return None


def _mem_per_node(v: dict[str, object], node_gpus: int, cpus: int) -> str | int | None:
    """--mem as given (a string), or MiB from --mem-per-gpu/--mem-per-cpu; None: not given."""
    if v.get("mem") is not None:
        return str(v["mem"])
    if v.get("mem_per_gpu") is not None:
        return _mib(str(v["mem_per_gpu"])) * max(node_gpus, 1)
    if v.get("mem_per_cpu") is not None:
        return _mib(str(v["mem_per_cpu"])) * cpus
    return None


def _mib(mem: str | int) -> int:
    if isinstance(mem, int):
        return mem
    from gpuyard.domain.units import parse_size_mib

    return parse_size_mib(mem)
