"""Charts: the progress and metrics jobs report of themselves, and GPU telemetry history
older than what the server keeps in memory (so a past job's GPU charts exist).

Revision ID: 0011
Revises: 0010
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "job_progress",
        sa.Column("job_id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("at", sa.Float, primary_key=True),
        sa.Column("step", sa.BigInteger),
        sa.Column("total", sa.BigInteger),
        sa.Column("metrics", sa.Text, nullable=False, server_default="{}"),
    )
    op.create_table(
        "gpu_samples",
        sa.Column("gpu_uuid", sa.Text, primary_key=True),
        sa.Column("resolution_s", sa.Integer, primary_key=True),
        sa.Column("at", sa.Float, primary_key=True),
        sa.Column("util_pct", sa.Float),
        sa.Column("util_peak_pct", sa.Float),
        sa.Column("mem_used_mib", sa.Float),
        sa.Column("mem_peak_mib", sa.Float),
        sa.Column("temp_c", sa.Float),
        sa.Column("power_w", sa.Float),
        sa.Column("holders", sa.Text, nullable=False, server_default="[]"),
    )
    op.create_index("ix_gpu_samples_at", "gpu_samples", ["at"])


def downgrade() -> None:
    op.drop_index("ix_gpu_samples_at", table_name="gpu_samples")
    op.drop_table("gpu_samples")
    op.drop_table("job_progress")
