"""Sweeps (`gpuyard sweep`): each sweep's definition, kept by its job array's id.

`definition`: the sweep file's table as submitted (JSON); `trials`: each trial's parameters
by index (JSON list); the metric, its goal and the early-stop rule are columns as well, for
whoever reads the database.

Revision ID: 0013
Revises: 0012
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "sweeps",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("owner", sa.Text, nullable=False),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("submitted_at", sa.Float, nullable=False),
        sa.Column("metric", sa.Text),
        sa.Column("goal", sa.Text),
        sa.Column("rule", sa.Text),
        sa.Column("definition", sa.Text, nullable=False),
        sa.Column("trials", sa.Text, nullable=False, server_default="[]"),
    )
    op.create_index("ix_sweeps_owner", "sweeps", ["owner"])


def downgrade() -> None:
    op.drop_index("ix_sweeps_owner", table_name="sweeps")
    op.drop_table("sweeps")
