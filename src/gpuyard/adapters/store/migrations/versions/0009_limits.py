"""Limits per user and per team: quotas (max GPUs running, max jobs pending, max GPU-hours per
rolling window) and fair-share weights, as an admin set them.

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "limits",
        sa.Column("kind", sa.String(8), primary_key=True),
        sa.Column("name", sa.String(255), primary_key=True),
        sa.Column("max_gpus", sa.Integer),
        sa.Column("max_pending", sa.Integer),
        sa.Column("max_gpu_hours", sa.Float),
        sa.Column("window_s", sa.Float, nullable=False),
        sa.Column("shares", sa.Float),
        sa.Column("updated_at", sa.Float, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("limits")
