"""Pure scheduling: which pending jobs start on which GPUs, with a reason for every wait.

No I/O here: the server's controller and the simulator call the same code.
"""

from gpuyard.scheduling.plan import PendingJob, Plan, SchedulingView, Start, plan

__all__ = ["PendingJob", "Plan", "SchedulingView", "Start", "plan"]
