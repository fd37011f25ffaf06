"""The database schema (SQLAlchemy Core); Alembic migrations create and evolve it.

Free text and lists are TEXT, never VARCHAR(n): SQLite ignores the length but PostgreSQL
enforces it, and an out-of-memory reason or a 128-GPU job's GPU list passes 255 characters.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
)

metadata = MetaData()

# A count of bytes: 64-bit. SQLite's INTEGER is already; PostgreSQL's is 32-bit (2 GiB).
BYTE_COUNT = Integer().with_variant(BigInteger(), "postgresql")

jobs = Table(
    "jobs",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("name", Text, nullable=False),
    Column("owner", String(255), nullable=False),
    Column("state", String(32), nullable=False),
    Column("priority", Integer, nullable=False),
    Column("spec", Text, nullable=False),  # JSON of the JobSpec (codec.py)
    Column("reason", Text, nullable=False),
    Column("gpus", Text, nullable=False),  # JSON list of GPU indices
    Column("node", Text, nullable=False),  # comma-separated machine names
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
    Column("held", Boolean, nullable=False, server_default="0"),  # gpuyard hold
    Column("restart_of", Integer),  # gpuyard restart: the job this one runs again
    Column("attempts", Text, nullable=False, server_default="[]"),  # JSON of earlier runs
    Column("idempotency_key", Text),  # the submit's Idempotency-Key header
    Column("not_before", Float),  # a retry's backoff: not started before this time
    Column("log_dropped_bytes", BYTE_COUNT, nullable=False, server_default="0"),  # log disk full
    Column("array_job_id", Integer),  # an array task's array (its first task's id)
    Column("array_task_id", Integer),  # an array task's index
    Column("max_rss_kib", BYTE_COUNT),  # its last run's largest resident set (sacct MaxRSS)
    Column("cpu_time_s", Float),  # its last run's user + system CPU seconds (sacct TotalCPU)
    Column("steps", Text, nullable=False, server_default="[]"),  # JSON: its last run's srun steps
)
# History pages are newest first by id (keyset): each filter has an index ending in id, so a
# page reads `limit` index entries, however long the history.
Index("ix_jobs_state_id", jobs.c.state, jobs.c.id)
Index("ix_jobs_owner_id", jobs.c.owner, jobs.c.id)
Index("ix_jobs_owner_state_id", jobs.c.owner, jobs.c.state, jobs.c.id)  # "my failed jobs"
Index("ix_jobs_owner_name_id", jobs.c.owner, jobs.c.name, jobs.c.id)  # "my runs of train"
Index("ix_jobs_name_id", jobs.c.name, jobs.c.id)
Index("ix_jobs_submitted_at", jobs.c.submitted_at)
# A retried submit finds the job its key made (the service keeps keys unique per owner; the
# index is not UNIQUE so that one bad row can never fail a whole group commit).
Index("ix_jobs_owner_idempotency_key", jobs.c.owner, jobs.c.idempotency_key)
# The server's start loads the most recently ended jobs, not all of them.
Index("ix_jobs_ended_at_id", jobs.c.ended_at, jobs.c.id)
# An array's tasks (`cancel A`, `sacct -j A`, aftercorr) after the book evicted them.
Index("ix_jobs_array_job_id", jobs.c.array_job_id, jobs.c.array_task_id)

# GPUs taken out of service (`gpuyard admin drain`, or automatically on a GPU failure), by GPU
# UUID (indices are renumbered when a Ray cluster changes); rows from before migration 0005,
# whose UUID was never recorded, are keyed "index:N".
gpu_drains = Table(
    "gpu_drains",
    metadata,
    Column("gpu_uuid", Text, primary_key=True),
    Column("reason", Text, nullable=False),
    Column("source", String(16), nullable=False),  # "admin", "auto" or "ray"
    Column("drained_at", Float, nullable=False),
)

# What each finished job did with its GPUs (telemetry), kept across restarts: JSON of the stats.
job_gpu_stats = Table(
    "job_gpu_stats",
    metadata,
    Column("job_id", Integer, primary_key=True, autoincrement=False),
    Column("stats", Text, nullable=False),
)

# Named counters. "max_job_id": the highest job id ever given, kept when `gpuyard clean` deletes
# the newest rows, so an id is never given twice (a script or a log may still name it).
counters = Table(
    "counters",
    metadata,
    Column("name", String(64), primary_key=True),
    Column("value", Integer, nullable=False),
)

# Accounts (migration 0008): who may use the server, in which team, with which role.
teams = Table(
    "teams",
    metadata,
    Column("name", String(255), primary_key=True),
    Column("created_at", Float, nullable=False),
)
users = Table(
    "users",
    metadata,
    Column("name", String(255), primary_key=True),
    Column("role", String(16), nullable=False),  # "admin" or "user"
    Column("team", String(255), ForeignKey("teams.name"), nullable=False),
    Column("unix_user", String(255)),  # None: the same as the name
    Column("disabled", Boolean, nullable=False, server_default="0"),
    Column("created_at", Float, nullable=False),
)
# API tokens: the SHA-256 of the secret, never the secret. Rows stay when revoked (`token
# list` shows them); ids are never reused (SQLite AUTOINCREMENT, a sequence on PostgreSQL).
api_tokens = Table(
    "api_tokens",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("token_hash", String(64), nullable=False, unique=True),
    Column("user_name", String(255), ForeignKey("users.name"), nullable=False),
    Column("scope", String(16), nullable=False),  # "read", "submit" or "admin"
    Column("created_at", Float, nullable=False),
    Column("expires_at", Float),
    Column("last_used_at", Float),
    Column("revoked_at", Float),
    sqlite_autoincrement=True,
)
# Limits (migration 0009): quotas and fair-share weights per user ("user") or team ("team").
limits = Table(
    "limits",
    metadata,
    Column("kind", String(8), primary_key=True),
    Column("name", String(255), primary_key=True),
    Column("max_gpus", Integer),
    Column("max_pending", Integer),
    Column("max_gpu_hours", Float),
    Column("window_s", Float, nullable=False),
    Column("shares", Float),
    Column("updated_at", Float, nullable=False),
)

# Progress (migration 0011): what a job reported of itself (`gpuyard.progress`, the stdout
# protocol, tqdm/Lightning/Trainer lines), one row per kept sample, bounded and downsampled
# per job by the service. `metrics`: JSON {name: value}.
job_progress = Table(
    "job_progress",
    metadata,
    Column("job_id", Integer, primary_key=True, autoincrement=False),
    Column("at", Float, primary_key=True),
    Column("step", BigInteger),
    Column("total", BigInteger),
    Column("metrics", Text, nullable=False, server_default="{}"),
)
# GPU telemetry history beyond what the server keeps in memory (1 s samples for 24 h): one row
# per GPU per `resolution_s` bucket (e.g. 60), the bucket's means and peaks, kept for charts
# of past jobs. `holders`: JSON list of the job ids on the GPU in that bucket.
gpu_samples = Table(
    "gpu_samples",
    metadata,
    Column("gpu_uuid", Text, primary_key=True),
    Column("resolution_s", Integer, primary_key=True),
    Column("at", Float, primary_key=True),
    Column("util_pct", Float),
    Column("util_peak_pct", Float),
    Column("mem_used_mib", Float),
    Column("mem_peak_mib", Float),
    Column("temp_c", Float),
    Column("power_w", Float),
    Column("holders", Text, nullable=False, server_default="[]"),
)
Index("ix_gpu_samples_at", gpu_samples.c.at)
# Sweeps (migration 0013): a sweep's definition by its job array's id. `definition`: the
# sweep file's table (JSON); `trials`: each trial's parameters by index (JSON list).
sweeps = Table(
    "sweeps",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("owner", Text, nullable=False),
    Column("name", Text, nullable=False),
    Column("submitted_at", Float, nullable=False),
    Column("metric", Text),
    Column("goal", Text),
    Column("rule", Text),
    Column("definition", Text, nullable=False),
    Column("trials", Text, nullable=False, server_default="[]"),
)
Index("ix_sweeps_owner", sweeps.c.owner)

# Webhooks (migration 0014): what a user or team set once (`gpuyard notify set`; `urls` and
# `events` JSON lists, `secret` signs their deliveries), and the delivery log: one row per
# event per URL, stored before it is sent (a restart retries the pending ones), kept bounded.
notify_settings = Table(
    "notify_settings",
    metadata,
    Column("kind", String(8), primary_key=True),
    Column("name", String(255), primary_key=True),
    Column("urls", Text, nullable=False, server_default="[]"),
    Column("events", Text, nullable=False, server_default="[]"),
    Column("secret", Text),
    Column("updated_at", Float, nullable=False),
    Column("secret_at", Float),
)
notify_deliveries = Table(
    "notify_deliveries",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("owner", String(255), nullable=False),
    Column("job_id", Integer),
    Column("event", String(16), nullable=False),
    Column("url", Text, nullable=False),
    Column("signer", Text, nullable=False),
    Column("job", Text, nullable=False, server_default="{}"),
    Column("created_at", Float, nullable=False),
    Column("state", String(16), nullable=False),
    Column("attempts", Integer, nullable=False, server_default="0"),
    Column("next_at", Float, nullable=False),
    Column("last_status", Integer),
    Column("last_error", Text, nullable=False, server_default=""),
    Column("updated_at", Float, nullable=False),
)
Index(
    "ix_notify_deliveries_owner_created", notify_deliveries.c.owner, notify_deliveries.c.created_at
)
Index("ix_notify_deliveries_state", notify_deliveries.c.state)

# The dashboard's events page (migration 0015): its last events, ids as the ring gave them
# (`services/machine/event_ring.py` prunes the older ones).
events = Table(
    "events",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("at", Float, nullable=False),
    Column("kind", String(16), nullable=False),
    Column("message", Text, nullable=False),
    Column("job_id", Integer),
    Column("owner", Text),
    Column("name", Text),
    Column("gpu", Integer),
)
