"""Conversion between domain Jobs and database rows."""

from __future__ import annotations

import json
from typing import Any

from gpuyard.domain.job import Job, JobSpec
from gpuyard.domain.states import JobState


def job_to_row(job: Job) -> dict[str, Any]:
    spec = job.spec
    return {
        "id": job.id,
        "name": spec.name,
        "owner": job.owner,
        "state": job.state.value,
        "priority": spec.priority,
        "spec": json.dumps(
            {
                "argv": list(spec.argv),
                "workdir": spec.workdir,
                "gpus": spec.gpus,
                "cpus": spec.cpus,
                "mem_mib": spec.mem_mib,
                "time_limit_s": spec.time_limit_s,
                "env": [list(kv) for kv in spec.env],
                "preemptible": spec.preemptible,
                "distributed": spec.distributed,
                "gpu_mem_mib": spec.gpu_mem_mib,
                "nodes": spec.nodes,
            }
        ),
        "reason": job.reason,
        "gpus": json.dumps(list(job.gpus)),
        "node": job.node,
        "exit_code": job.exit_code,
        "submitted_at": job.submitted_at,
        "started_at": job.started_at,
        "ended_at": job.ended_at,
        "pid": job.pid,
        "pid_started_at": job.pid_started_at,
        "stop_intent": job.stop_intent.value if job.stop_intent else None,
        "version": job.version,
        "attained_gpu_s": job.attained_gpu_s,
        "restarts": job.restarts,
    }


def row_to_job(row: Any) -> Job:
    spec_data = json.loads(row.spec)
    spec = JobSpec(
        argv=tuple(spec_data["argv"]),
        name=row.name,
        workdir=spec_data["workdir"],
        gpus=spec_data["gpus"],
        cpus=spec_data["cpus"],
        mem_mib=spec_data["mem_mib"],
        time_limit_s=spec_data["time_limit_s"],
        priority=row.priority,
        env=tuple((k, v) for k, v in spec_data["env"]),
        preemptible=spec_data.get("preemptible", True),
        distributed=spec_data.get("distributed"),
        gpu_mem_mib=spec_data.get("gpu_mem_mib", 0),
        nodes=spec_data.get("nodes", 1),
    )
    return Job(
        id=row.id,
        spec=spec,
        owner=row.owner,
        state=JobState(row.state),
        submitted_at=row.submitted_at,
        reason=row.reason,
        gpus=tuple(json.loads(row.gpus)),
        node=row.node,
        exit_code=row.exit_code,
        started_at=row.started_at,
        ended_at=row.ended_at,
        pid=row.pid,
        pid_started_at=row.pid_started_at,
        stop_intent=JobState(row.stop_intent) if row.stop_intent else None,
        version=row.version,
        attained_gpu_s=row.attained_gpu_s,
        restarts=row.restarts,
    )
