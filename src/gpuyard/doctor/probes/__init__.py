"""The doctor's probes: facts read from this machine in the CLI's own process, once.

`driver_facts` asks NVML about the driver and GPUs; `frameworks` runs `probe_script.py` in the
interpreter being checked. They implement no port of the server (the server's NVML reader is
`adapters/gpus/nvml.py`): they belong to `gpuyard doctor` and `submit --check`.
"""
