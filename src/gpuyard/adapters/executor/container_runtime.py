"""Which container runtime runs `--container` jobs here: apptainer (or singularity, its older
name), else podman, as found on the server's PATH at its start (`Inventory.container_runtime`).
The recipe that runs a job in it is the services' (`services/launch/plan.py` `container_argv`)."""

from __future__ import annotations

import os
import shutil

from gpuyard.services.ports import ContainerRuntime

# In order of preference: apptainer runs an image as the user, with no daemon and no user
# namespaces to set up; podman needs CDI for GPUs (`nvidia-ctk cdi generate`).
RUNTIMES = ("apptainer", "singularity", "podman")


def find_container_runtime(path: str | None = None) -> ContainerRuntime | None:
    """The first of RUNTIMES on `path` (None: the server's PATH); None: none installed."""
    search = path if path is not None else os.environ.get("PATH", os.defpath)
    for kind in RUNTIMES:
        found = shutil.which(kind, path=search)
        if found is not None:
            return ContainerRuntime(kind, found)
    return None
