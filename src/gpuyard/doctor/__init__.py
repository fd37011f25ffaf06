"""`gpuyard doctor`: is this machine (and a job's Python environment) fit to train on its GPUs?

`model` (the facts and the checks), `compat` (CUDA and GPU-architecture rules) and `checks`
(facts -> checks) are pure: standard library only. Facts are gathered by the probes
(`probes.driver_facts` over NVML, `probes.frameworks` running a probe script in a given
interpreter) and put together by `gather.machine_facts`: in the CLI's process for its own
machine (`cli/doctoring.py`), on each machine of the server by its agent for `--node/--all`
(facts as JSON: `wire`).
"""
