"""Per-job GPU stats, kept across restarts.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "job_gpu_stats",
        sa.Column("job_id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("stats", sa.Text, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("job_gpu_stats")
