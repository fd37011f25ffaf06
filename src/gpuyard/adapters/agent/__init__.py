"""The machine agent: one machine's launcher, job folders and GPUs (`machine.py`), run in the
server's process for its own machine and as a Ray actor on every other one."""
