"""The database schema (SQLAlchemy Core); Alembic migrations create and evolve it."""

from __future__ import annotations

from sqlalchemy import Column, Float, Integer, MetaData, String, Table, Text

metadata = MetaData()

jobs = Table(
    "jobs",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("name", String(255), nullable=False),
    Column("owner", String(255), nullable=False),
    Column("state", String(32), nullable=False, index=True),
    Column("priority", Integer, nullable=False),
    Column("spec", Text, nullable=False),  # JSON of the JobSpec
    Column("reason", String(255), nullable=False),
    Column("gpus", String(255), nullable=False),  # JSON list of GPU indices
    Column("node", String(255), nullable=False),
    Column("exit_code", Integer),
    Column("submitted_at", Float, nullable=False),
    Column("started_at", Float),
    Column("ended_at", Float),
    Column("pid", Integer),
    Column("pid_started_at", Float),
    Column("stop_intent", String(32)),
    Column("version", Integer, nullable=False),
    Column("attained_gpu_s", Float, nullable=False, server_default="0"),
    Column("restarts", Integer, nullable=False, server_default="0"),
)

# GPUs taken out of service (`gpuyard admin drain`, or automatically on a GPU failure).
gpu_drains = Table(
    "gpu_drains",
    metadata,
    Column("gpu_index", Integer, primary_key=True, autoincrement=False),
    Column("reason", String(255), nullable=False),
    Column("source", String(16), nullable=False),  # "admin" or "auto"
    Column("drained_at", Float, nullable=False),
)

# What each finished job did with its GPUs (telemetry), kept across restarts: JSON of the stats.
job_gpu_stats = Table(
    "job_gpu_stats",
    metadata,
    Column("job_id", Integer, primary_key=True, autoincrement=False),
    Column("stats", Text, nullable=False),
)
