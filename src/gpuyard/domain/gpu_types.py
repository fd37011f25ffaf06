"""GPU types: which GPUs a job's `--gpu-type` (or `--gres=gpu:TYPE:N`) names, and how GPUs of a
machine fall into pools of one type each.

A type names a vendor ("nvidia", "amd"), a model by one or more consecutive words of the GPU's
name ("mi300x" is "AMD Instinct MI300X"; "h100" is "NVIDIA H100 80GB HBM3"; "rtx4090" is "NVIDIA
GeForce RTX 4090"), or an architecture ("gfx942", "9.0" written "90"), case-insensitive and
without spaces, dashes or dots. Whole words only: "a10" is not an "NVIDIA A100-SXM4-80GB".
Declared GPUs (`--gpus N` without a driver) are of no known type: they take a job of any type
(an sbatch script's `--gres=gpu:a100:2` runs on them as on the machine it was written for).

Pools: the GPUs of one machine with the same vendor and name. A job takes all its GPUs from one
pool when it names no type (never an NVIDIA and an AMD GPU together: no framework drives both in
one process), or from the pools its type matches.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from gpuyard.domain.errors import InvalidRequest
from gpuyard.domain.job import Gpu

_WORD = re.compile(r"[a-z0-9]+")
ANY_TYPE = "*"  # the label of a GPU of unknown type (declared): every type matches it


def normalize_type(text: str) -> str:
    """A type as matched: lowercase letters and digits only ("MI-300X" -> "mi300x")."""
    return "".join(_WORD.findall(text.lower()))


def type_labels(vendor: str, name: str, arch: str = "") -> frozenset[str]:
    """Every normalized type that names a GPU of this vendor, name and architecture: the vendor,
    each run of consecutive words of the name, and the architecture."""
    words = _WORD.findall(name.lower())
    labels = {"".join(words[i:j]) for i in range(len(words)) for j in range(i + 1, len(words) + 1)}
    labels.update(label for label in (normalize_type(vendor), normalize_type(arch)) if label)
    return frozenset(labels)


def gpu_labels(gpu: Gpu) -> frozenset[str]:
    """The types a GPU answers to; a declared GPU's: any (`ANY_TYPE`)."""
    if not gpu.detected:
        return frozenset({ANY_TYPE})
    return type_labels(gpu.vendor, gpu.name, gpu.arch)


def matches(gpu_type: str, gpu: Gpu) -> bool:
    """Whether `gpu` is of the type asked for ("" matches every GPU)."""
    wanted = normalize_type(gpu_type)
    labels = gpu_labels(gpu)
    return not wanted or wanted in labels or ANY_TYPE in labels


def pool_key(gpu: Gpu) -> tuple[str, str, str]:
    """The pool a GPU belongs to on its machine: (machine, vendor, model name)."""
    return (gpu.node, gpu.vendor, gpu.name)


def pools(gpus: Iterable[Gpu]) -> dict[tuple[str, str, str], list[Gpu]]:
    """The GPUs of each pool, pools in the order of their first GPU."""
    out: dict[tuple[str, str, str], list[Gpu]] = {}
    for gpu in gpus:
        out.setdefault(pool_key(gpu), []).append(gpu)
    return out


def describe_types(gpus: Sequence[Gpu]) -> str:
    """The types a server has, for a refusal: "2 x AMD Instinct MI300X (amd), 4 x NVIDIA H100
    80GB HBM3 (nvidia)"."""
    counts: dict[tuple[str, str], int] = {}
    for gpu in gpus:
        counts[(gpu.name, gpu.vendor)] = counts.get((gpu.name, gpu.vendor), 0) + 1
    return ", ".join(
        f"{n} x {name}" + (f" ({vendor})" if vendor else "") for (name, vendor), n in counts.items()
    )


def check_gpu_type(gpu_type: str, gpus_wanted: int, nodes: int, gpus: Sequence[Gpu]) -> None:
    """Refuse (InvalidRequest, field gpu_type) a type no GPU of the server has, or one whose
    machines have too few GPUs of it for the job (`gpus_wanted` over `nodes` machines)."""
    per_node = -(-gpus_wanted // max(1, nodes))
    if not gpu_type or not normalize_type(gpu_type):
        if per_node <= 1 or len({(g.vendor, g.name) for g in gpus}) <= 1:
            return  # one type (or one GPU asked): nothing to refuse, no pools to build per submit
        largest = max((len(pool) for pool in pools(gpus).values()), default=0)
        if per_node > largest:
            raise InvalidRequest(
                f"the job asks for {per_node} GPUs on one machine, but a machine here has at "
                f"most {largest} of one type ({describe_types(gpus)}); a job's GPUs are all of "
                "one type: ask for fewer",
                field="gpus",
            )
        return
    if not gpus:
        raise InvalidRequest(
            f"--gpu-type {gpu_type}: this server has no GPUs; submit without --gpu-type",
            field="gpu_type",
        )
    fitting = [gpu for gpu in gpus if matches(gpu_type, gpu)]
    if not fitting:
        raise InvalidRequest(
            f"--gpu-type {gpu_type}: no GPU here is of that type; this server has "
            f"{describe_types(gpus)} (ask for a vendor, a model such as "
            f"{_example(gpus)}, or no type)",
            field="gpu_type",
        )
    per_machine: dict[str, int] = {}
    for gpu in fitting:
        per_machine[gpu.node] = per_machine.get(gpu.node, 0) + 1
    enough = sum(1 for count in per_machine.values() if count >= per_node)
    if gpus_wanted and enough < max(1, nodes):
        most = max(per_machine.values())
        raise InvalidRequest(
            f"--gpu-type {gpu_type}: the job asks for {per_node} GPUs of that type on "
            f"{'one machine' if nodes <= 1 else f'each of {nodes} machines'}, but a machine "
            f"here has at most {most}; ask for fewer",
            field="gpu_type",
        )


def _example(gpus: Sequence[Gpu]) -> str:
    words = _WORD.findall(gpus[0].name.lower())
    return words[-1] if words else "h100"
