"""How `queue` and `show` tell a service (`gpuyard serve`, `run --jupyter`) from a batch job.

    queue: 7  jupyter  ada  RUNNING ...  0 (service :23817 healthy)
    show:  Service: http://127.0.0.1:23817, health /api: healthy since 10:02:11

Standard library only: the CLI's start path.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def service_note(job: dict[str, Any]) -> str:
    """`(service :PORT STATE)` for a service in `queue`'s last column; "" for other jobs."""
    if job.get("kind") != "service" or not job.get("service_port"):
        return ""
    health = job.get("service_health") or {}
    state = f" {health['state']}" if health.get("state") else ""
    return f"(service :{job['service_port']}{state})"


def service_fields(job: dict[str, Any], when: Any) -> list[tuple[str, object]]:
    """`show`'s Service line (`when` formats a time); none for other jobs."""
    if job.get("kind") != "service":
        return []
    url = job.get("service_url") or "-"
    check = f"health {job['health_path']}" if job.get("health_path") else "health: TCP connect"
    health = job.get("service_health")
    if not health:
        return [("Service", f"{url}, {check} (checked while it runs)")]
    said = f"{health['state']} since {when(health.get('since'))}"
    if health["state"] != "healthy" and health.get("last_error"):
        said += f" ({health['failures']} failed checks in a row; last: {health['last_error']})"
    grace = job.get("health_grace_s", 60)
    return [("Service", f"{url}, {check}: {said}; restarted when unhealthy past {grace} s")]
