"""`gpuyard`'s typer app: built here, every command registered from its own module.

The rule: every command and command group lives in a `*_cmd.py` module, whose
`register(app, admin)` adds it to the app (or to `gpuyard admin`); this module only builds the
app and the `admin` group and calls each `register`, in the order `gpuyard --help` lists the
commands. Options two commands share have a module of their own (`submit_options.py`: submit's,
which sbatch takes too); what the commands run lives apart from typer where the fast path runs
it too (`commands.py`).

`cli/main.py` runs the hot commands (submit, queue, show, cancel) without importing this
module (typer + click cost ~40-90 ms); a command line naming another command is run by that
command's module alone (`cli/app_shell.py`); it comes here for everything else.
"""

from gpuyard.cli import (
    gpus_cmd,
    identity_cmd,
    jobs_cmd,
    limits_cmd,
    node_cmd,
    notify_cmd,
    run_cmd,
    sbatch_cmd,
    scontrol_cmd,
    serve_cmd,
    server_cmd,
    simulate_cmd,
    sinfo_cmd,
    slurm_queries_cmd,
    srun_cmd,
    submit_cmd,
    sweep_cmd,
)
from gpuyard.cli.app_shell import new_app

app, admin = new_app()

for module in (
    submit_cmd,  # submit
    jobs_cmd,  # queue, show, logs, cancel, hold, release, requeue, restart, update, clean, wait
    gpus_cmd,  # gpus, nodes, top; admin drain, resume
    node_cmd,  # node join: this machine into a Ray cluster
    server_cmd,  # dashboard, doctor, server
    identity_cmd,  # login, token; admin user, team
    limits_cmd,  # share, usage; admin limit
    run_cmd,  # run, attach: interactive sessions, JupyterLab
    serve_cmd,  # serve: services
    sweep_cmd,  # sweep
    slurm_queries_cmd,  # squeue, sacct, scancel
    sbatch_cmd,  # sbatch
    scontrol_cmd,  # scontrol
    sinfo_cmd,  # sinfo
    srun_cmd,  # srun, salloc, slurm-commands (install)
    simulate_cmd,  # simulate
    notify_cmd,  # notify: webhooks
):
    module.register(app, admin)
