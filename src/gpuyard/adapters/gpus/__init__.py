"""GPU probes: NVML for detected GPUs, the admin's declaration otherwise."""
