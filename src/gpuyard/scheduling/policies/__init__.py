"""The scheduling policies, by name: `make_policy(name)` builds a fresh one."""

from __future__ import annotations

from collections.abc import Callable

from gpuyard.domain.errors import InvalidRequest
from gpuyard.scheduling.policies.backfill import BackfillPolicy
from gpuyard.scheduling.policies.default import DefaultPolicy
from gpuyard.scheduling.policies.fairshare import FairsharePolicy
from gpuyard.scheduling.policies.fifo import FifoPolicy
from gpuyard.scheduling.policies.las import LasPolicy
from gpuyard.scheduling.policies.srtf import SrtfOraclePolicy
from gpuyard.scheduling.policy import Policy

_FACTORIES: dict[str, Callable[[], Policy]] = {
    "fifo": FifoPolicy,
    "backfill": BackfillPolicy,
    "fairshare": FairsharePolicy,
    "las": LasPolicy,
    "srtf-oracle": SrtfOraclePolicy,
    "default": DefaultPolicy,
}
# Reference bounds that read true durations: the simulator may run them, the server never.
ORACLES: frozenset[str] = frozenset({"srtf-oracle"})


def policy_names(*, include_oracles: bool = True) -> list[str]:
    return [n for n in _FACTORIES if include_oracles or n not in ORACLES]


def make_policy(name: str, *, for_server: bool = False) -> Policy:
    """A fresh policy instance; oracles are refused for the live server."""
    if name not in _FACTORIES or (for_server and name in ORACLES):
        allowed = ", ".join(policy_names(include_oracles=not for_server))
        raise InvalidRequest(f"unknown policy {name!r}: choose one of {allowed}", field="policy")
    return _FACTORIES[name]()
