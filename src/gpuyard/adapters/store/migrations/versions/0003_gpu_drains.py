"""GPUs taken out of service.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "gpu_drains",
        sa.Column("gpu_index", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("reason", sa.String(255), nullable=False),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("drained_at", sa.Float, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("gpu_drains")
