"""Attained GPU service and restart count: what a preempted and requeued job keeps.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("attained_gpu_s", sa.Float, nullable=False, server_default="0"))
        batch.add_column(sa.Column("restarts", sa.Integer, nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("restarts")
        batch.drop_column("attained_gpu_s")
