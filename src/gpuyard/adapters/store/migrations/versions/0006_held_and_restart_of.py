"""Holds and restart links: a held job stays held across a server restart (`gpuyard hold`),
and a job run again (`gpuyard restart`) names the job it repeats.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("held", sa.Boolean, nullable=False, server_default="0"))
        batch.add_column(sa.Column("restart_of", sa.Integer))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("restart_of")
        batch.drop_column("held")
