"""A hyper-parameter sweep file (`gpuyard sweep sweep.toml`): what it may say, its trials.

Worked example. This file

    command = "python3 train.py --lr {lr}"
    method = "grid"
    max_running = 2
    [resources]
    gpus = 1
    [parameters]
    lr = [0.1, 0.01]
    layers = [2, 4]
    [metric]
    name = "val_loss"

makes four trials, the first parameter varying slowest: (lr 0.1, layers 2), (0.1, 4),
(0.01, 2), (0.01, 4). Trial 2 runs `python3 train.py --lr 0.01` with `SWEEP_LR=0.01`,
`SWEEP_LAYERS=2` and `SWEEP_TRIAL=2` in its environment (`args = true` would also append
`--lr 0.01 --layers 2`). At most two trials run at once (the array's `%2`).

How a trial gets its parameters (all three, so any program can read them):
- `{name}` in the command is replaced by the value (`{trial}`: the trial's index);
- the environment has `SWEEP_<NAME>` (upper case) and `SWEEP_TRIAL`;
- with `args = true`, `--name value` for each parameter is appended to the command.

`method = "random"`: `trials` draws (seeded by `seed`, 0 by default: the same file makes the
same trials), each parameter from its distribution: `{distribution = "uniform" | "loguniform"
| "int", min, max}` (int: both ends included) or `{distribution = "choice", values = [...]}`;
a plain list is a choice. A grid takes lists (and choices) only.

Errors are InvalidRequest with `field` the key's dotted path (`parameters.lr.min`), so the CLI
can point at the line of the file; `parse_sweep` takes the file's table (tomllib's dict, or
the same JSON the API receives). Standard library only.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import random
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuyard.domain.errors import InvalidRequest
from gpuyard.domain.spec_rules import SpecDraft
from gpuyard.domain.units import parse_duration_s, parse_size_mib

MAX_TRIALS = 10_000
MAX_PARAMETERS = 64
MAX_VALUES = 1_000  # values of one list
GOALS = ("minimize", "maximize")
METHODS = ("grid", "random")
RULES = ("median",)
DISTRIBUTIONS = ("uniform", "loguniform", "int", "choice")

Value = str | int | float | bool

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}\Z")
_METRIC = re.compile(r"[A-Za-z_][A-Za-z0-9_./\-]{0,63}\Z")
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
_TOP_KEYS = (
    "name", "command", "args", "method", "trials", "seed", "max_running", "resources", "env",
    "parameters", "metric", "early_stop",
)  # fmt: skip
# [resources] key -> (SpecDraft field, parse)
_RESOURCES: dict[str, tuple[str, Any]] = {
    "gpus": ("gpus", "int"),
    "cpus": ("cpus", "int"),
    "nodes": ("nodes", "int"),
    "priority": ("priority", "int"),
    "mem": ("mem_mib", "size"),
    "gpu_mem": ("gpu_mem_mib", "size"),
    "time": ("time_limit_s", "duration"),
    "preemptible": ("preemptible", "bool"),
    "gpu_type": ("gpu_type", "str"),
    "python": ("python", "str"),
    "venv": ("venv", "str"),
}


@dataclass(frozen=True, slots=True)
class Parameter:
    """One searched parameter: `values` (a grid's list or a choice) or a distribution."""

    name: str
    distribution: str  # "choice" for lists
    values: tuple[Value, ...] = ()
    low: float = 0.0
    high: float = 0.0


@dataclass(frozen=True, slots=True)
class Metric:
    name: str
    goal: str = "minimize"

    def better(self, a: float, b: float) -> bool:
        """Whether `a` is strictly better than `b`."""
        return a < b if self.goal == "minimize" else a > b


@dataclass(frozen=True, slots=True)
class EarlyStop:
    """The median stopping rule's settings (`domain/median_stop.py`)."""

    rule: str = "median"
    min_steps: int = 0  # grace: no trial is judged before it reported this step
    min_trials: int = 3  # warmup: judged only against this many others that got that far


@dataclass(frozen=True, slots=True)
class Sweep:
    """A sweep file, checked."""

    command: tuple[str, ...]
    parameters: tuple[Parameter, ...]
    name: str = "sweep"
    args: bool = False
    method: str = "grid"
    trials: int = 0  # random: how many draws (grid: the product's size)
    seed: int = 0
    max_running: int = 0  # 0: no cap
    resources: Mapping[str, Any] = field(default_factory=dict)  # SpecDraft fields
    env: tuple[tuple[str, str], ...] = ()
    metric: Metric | None = None
    early_stop: EarlyStop | None = None

    def expand(self) -> list[dict[str, Value]]:
        """Every trial's parameters, in trial order."""
        if self.method == "grid":
            names = [p.name for p in self.parameters]
            product = itertools.product(*(p.values for p in self.parameters))
            return [dict(zip(names, combo, strict=True)) for combo in product]
        rng = random.Random(self.seed)
        return [{p.name: _draw(p, rng) for p in self.parameters} for _ in range(self.trials)]

    def draft(self, index: int, params: Mapping[str, Value], workdir: str | None) -> SpecDraft:
        """Trial `index`'s job, as a front door's draft (the spec rules decide the rest)."""
        text = {name: value_text(v) for name, v in params.items()}
        text_with_trial = {**text, "trial": str(index)}
        argv = [_PLACEHOLDER.sub(lambda m: text_with_trial[m.group(1)], a) for a in self.command]
        if self.args:
            for name, value in text.items():
                argv += [f"--{name}", value]
        env = dict(self.env)
        env.update({env_name(name): value for name, value in text.items()})
        env["SWEEP_TRIAL"] = str(index)
        return SpecDraft(
            argv=tuple(argv), name=self.name, workdir=workdir, env=tuple(sorted(env.items())),
            array_max_running=self.max_running, **self.resources,
        )  # fmt: skip


def env_name(parameter: str) -> str:
    return "SWEEP_" + parameter.upper()


def value_text(value: Value) -> str:
    """A parameter's value as the command and environment get it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return str(value)


def _draw(p: Parameter, rng: random.Random) -> Value:
    if p.distribution == "choice":
        return p.values[rng.randrange(len(p.values))]
    if p.distribution == "int":
        return rng.randint(int(p.low), int(p.high))
    if p.distribution == "loguniform":
        value = math.exp(rng.uniform(math.log(p.low), math.log(p.high)))
    else:
        value = rng.uniform(p.low, p.high)
    return float(f"{value:.6g}")  # readable in a table and a command line


# -- parsing ----------------------------------------------------------------------------------
def parse_sweep(doc: Mapping[str, Any]) -> Sweep:
    """The checked sweep of a file's table; InvalidRequest naming the key (`field`)."""
    if not isinstance(doc, Mapping):
        raise _bad("", "a sweep is a table of keys (command, parameters, ...)")
    unknown = [k for k in doc if k not in _TOP_KEYS]
    if unknown:
        raise _bad(str(unknown[0]), f"unknown key; a sweep file has {', '.join(_TOP_KEYS)}")
    method = _choice(doc, "method", METHODS, "grid")
    parameters = _parameters(doc.get("parameters"), method)
    sweep = Sweep(
        command=_command(doc.get("command"), {p.name for p in parameters}),
        parameters=parameters,
        name=_text(doc, "name", "sweep", 200),
        args=_bool(doc, "args", False),
        method=method,
        seed=_int(doc, "seed", 0, 0, 2**63 - 1),
        max_running=_int(doc, "max_running", 0, 0, MAX_TRIALS),
        resources=_resources(doc.get("resources", {})),
        env=_env(doc.get("env", {})),
        metric=_metric(doc.get("metric")),
        early_stop=_early_stop(doc.get("early_stop")),
    )
    if sweep.early_stop is not None and sweep.metric is None:
        raise _bad("early_stop", "early stopping needs a [metric] (name = ..., goal = ...)")
    if method == "grid":
        if "trials" in doc:
            raise _bad("trials", 'a grid runs every combination; `trials` is for method = "random"')
        count = math.prod(len(p.values) for p in parameters)
        if count > MAX_TRIALS:
            raise _bad("parameters", f"the grid makes {count} trials; at most {MAX_TRIALS}")
        return sweep
    return dataclasses.replace(sweep, trials=_int(doc, "trials", None, 1, MAX_TRIALS))


def _bad(key: str, message: str) -> InvalidRequest:
    where = f"{key}: " if key else ""
    return InvalidRequest(f"sweep file: {where}{message}", field=key or "sweep")


def _command(raw: Any, names: set[str]) -> tuple[str, ...]:
    if isinstance(raw, str):
        try:
            argv = shlex.split(raw)
        except ValueError as exc:
            raise _bad("command", f"cannot split it into words ({exc})") from None
    elif isinstance(raw, list) and all(isinstance(a, str) for a in raw):
        argv = list(raw)
    else:
        raise _bad("command", 'missing or not a string or list of strings, e.g. "python3 t.py"')
    if not argv or not argv[0]:
        raise _bad("command", "is empty: name the program each trial runs")
    for word in argv:
        for used in _PLACEHOLDER.findall(word):
            if used not in names and used != "trial":
                raise _bad("command", f"{{{used}}} names no parameter; add it to [parameters]")
    return tuple(argv)


def _parameters(raw: Any, method: str) -> tuple[Parameter, ...]:
    if not isinstance(raw, Mapping) or not raw:
        raise _bad("parameters", "missing: a [parameters] table with at least one parameter")
    if len(raw) > MAX_PARAMETERS:
        raise _bad("parameters", f"{len(raw)} parameters; at most {MAX_PARAMETERS}")
    return tuple(_parameter(str(name), spec, method) for name, spec in raw.items())


def _parameter(name: str, spec: Any, method: str) -> Parameter:
    key = f"parameters.{name}"
    if not _NAME.match(name) or name == "trial":
        raise _bad(key, "a parameter's name is a word of letters, digits and _ (not `trial`)")
    if isinstance(spec, list):
        return Parameter(name, "choice", _values(key, spec))
    if not isinstance(spec, Mapping):
        raise _bad(key, 'a list of values, or a table such as {distribution = "uniform", ...}')
    kind = spec.get("distribution")
    if kind not in DISTRIBUTIONS:
        raise _bad(f"{key}.distribution", f"one of {', '.join(DISTRIBUTIONS)}")
    allowed = ("distribution", "values") if kind == "choice" else ("distribution", "min", "max")
    extra = [k for k in spec if k not in allowed]
    if extra:
        raise _bad(f"{key}.{extra[0]}", f"unknown key; a {kind} takes {', '.join(allowed[1:])}")
    if kind == "choice":
        return Parameter(name, "choice", _values(f"{key}.values", spec.get("values")))
    if method == "grid":
        raise _bad(key, f'a {kind} distribution needs method = "random" (a grid takes lists)')
    low, high = (_number(spec.get(end), f"{key}.{end}", kind == "int") for end in ("min", "max"))
    if not low < high and not (kind == "int" and low == high):
        raise _bad(f"{key}.max", f"must be more than min ({value_text(low)})")
    if kind == "loguniform" and low <= 0:
        raise _bad(f"{key}.min", "a loguniform range must be above 0")
    return Parameter(name, kind, (), low, high)


def _values(key: str, raw: Any) -> tuple[Value, ...]:
    if not isinstance(raw, list) or not raw:
        raise _bad(key, "a non-empty list of values")
    if len(raw) > MAX_VALUES:
        raise _bad(key, f"{len(raw)} values; at most {MAX_VALUES}")
    for value in raw:
        ok = isinstance(value, (str, int, float, bool))
        if not ok or (isinstance(value, float) and not math.isfinite(value)):
            raise _bad(key, f"{value!r} is not a string, number or boolean")
        if isinstance(value, str) and (len(value) > 1024 or "\x00" in value):
            raise _bad(key, "a value is at most 1024 characters, without NUL")
    return tuple(raw)


def _number(raw: Any, key: str, whole: bool) -> float:
    if isinstance(raw, bool) or not isinstance(raw, (int, float)):
        raise _bad(key, "missing or not a number")
    if whole and not isinstance(raw, int):
        raise _bad(key, "an int distribution takes whole numbers")
    if abs(raw) > 10**300 or not math.isfinite(raw):
        raise _bad(key, "not a finite number")
    return float(raw) if not whole else int(raw)


def _resources(raw: Any) -> dict[str, Any]:
    if not isinstance(raw, Mapping):
        raise _bad("resources", 'a table such as {gpus = 1, mem = "16G", time = "2h"}')
    out: dict[str, Any] = {}
    for key, value in raw.items():
        where = f"resources.{key}"
        if key not in _RESOURCES:
            raise _bad(where, f"unknown resource; one of {', '.join(_RESOURCES)}")
        draft_field, kind = _RESOURCES[key]
        if kind == "int":
            out[draft_field] = _int(raw, key, 0, -(10**6), 10**6, where)
        elif kind == "bool":
            out[draft_field] = _bool(raw, key, False, where)
        elif not isinstance(value, str) and not (kind == "size" and _whole(value)):
            raise _bad(where, 'a string, e.g. "16G" or "2h"' if kind != "str" else "a string")
        elif kind in ("size", "duration"):
            try:
                if kind == "size":
                    out[draft_field] = parse_size_mib(str(value), field=where)
                else:
                    out[draft_field] = parse_duration_s(value, field=where)
            except InvalidRequest as exc:
                raise _bad(where, exc.message) from None
        else:
            out[draft_field] = value
    return out


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _env(raw: Any) -> tuple[tuple[str, str], ...]:
    if not isinstance(raw, Mapping):
        raise _bad("env", 'a table of NAME = "value"')
    for name, value in raw.items():
        if not isinstance(value, str):
            raise _bad(f"env.{name}", "a string")
        if name.startswith("SWEEP_"):
            raise _bad(f"env.{name}", "SWEEP_* names are the trial's parameters")
    return tuple(sorted((str(k), v) for k, v in raw.items()))


def _metric(raw: Any) -> Metric | None:
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise _bad("metric", 'a table: name = "val_loss", goal = "minimize"')
    extra = [k for k in raw if k not in ("name", "goal")]
    if extra:
        raise _bad(f"metric.{extra[0]}", "unknown key; [metric] has name and goal")
    name = raw.get("name")
    if not isinstance(name, str) or not _METRIC.match(name):
        raise _bad("metric.name", "the name a trial reports, e.g. val_loss")
    return Metric(name, _choice(raw, "goal", GOALS, "minimize", "metric.goal"))


def _early_stop(raw: Any) -> EarlyStop | None:
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise _bad("early_stop", 'a table: rule = "median", min_steps = 100, min_trials = 3')
    extra = [k for k in raw if k not in ("rule", "min_steps", "min_trials")]
    if extra:
        raise _bad(f"early_stop.{extra[0]}", "unknown key; it has rule, min_steps, min_trials")
    return EarlyStop(
        _choice(raw, "rule", RULES, "median", "early_stop.rule"),
        _int(raw, "min_steps", 0, 0, 2**62, "early_stop.min_steps"),
        _int(raw, "min_trials", 3, 1, MAX_TRIALS, "early_stop.min_trials"),
    )


def _choice(
    doc: Mapping[str, Any], key: str, allowed: Sequence[str], default: str, where: str = ""
) -> str:
    value = doc.get(key, default)
    if value not in allowed:
        raise _bad(where or key, f"one of {', '.join(repr(a) for a in allowed)}")
    return str(value)


def _int(
    doc: Mapping[str, Any], key: str, default: int | None, low: int, high: int, where: str = ""
) -> int:
    value = doc.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad(where or key, "missing or not a whole number")
    if not low <= value <= high:
        raise _bad(where or key, f"{value} is out of range ({low} to {high})")
    return value


def _bool(doc: Mapping[str, Any], key: str, default: bool, where: str = "") -> bool:
    value = doc.get(key, default)
    if not isinstance(value, bool):
        raise _bad(where or key, "true or false")
    return value


def _text(doc: Mapping[str, Any], key: str, default: str, most: int) -> str:
    value = doc.get(key, default)
    if not isinstance(value, str) or not value.strip() or len(value) > most:
        raise _bad(key, f"a non-empty string of at most {most} characters")
    return value


def line_of(text: str, key: str) -> int | None:
    """The line (1-based) of a file where the dotted `key` is set, as near as a plain scan
    can tell (for the CLI's error): after the deepest `[table]` header of its path, each
    further part's `part =` in turn (an inline table's keys are on its line)."""
    if not key or key == "sweep":
        return None
    parts = key.split(".")
    lines = text.splitlines()
    at, done = 0, 0
    for depth in range(len(parts) - 1, 0, -1):
        words = r"\s*\.\s*".join(re.escape(p) for p in parts[:depth])
        header = re.compile(r"\s*\[\s*" + words + r"\s*\]")
        found = next((i for i, line in enumerate(lines) if header.match(line)), None)
        if found is not None:
            at, done = found, depth
            break
    for part in parts[done:]:
        assign = re.compile(r"(?:^\s*|[{,]\s*)\"?" + re.escape(part) + r"\"?\s*=")
        found = next((i for i in range(at, len(lines)) if assign.search(lines[i])), None)
        if found is None:
            break
        at, done = found, done + 1
    return at + 1 if done else None


@dataclass(frozen=True, slots=True)
class SweepRecord:
    """A submitted sweep as the server keeps it: its id is its job array's (trial `i` is the
    array's task `i`), its file's table as submitted, each trial's parameters by index."""

    id: int
    owner: str
    name: str
    submitted_at: float
    definition: Mapping[str, Any]
    trials: tuple[Mapping[str, Value], ...]

    @property
    def sweep(self) -> Sweep:
        return parse_sweep(self.definition)
