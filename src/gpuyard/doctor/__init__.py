"""`gpuyard doctor`: is this machine (and a job's Python environment) fit to train on its GPUs?

`model` (the facts and the checks), `compat` (CUDA and GPU-architecture rules) and `checks`
(facts -> checks) are pure: standard library only. Facts are gathered by the probes
(`probes.driver_facts` over NVML, `probes.frameworks` running a probe script in a given
interpreter) and put together by `cli/doctoring.py`.
"""
