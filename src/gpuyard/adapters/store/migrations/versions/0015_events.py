"""The dashboard's events page, kept across restarts: the last events (the ring prunes the
rest), ids as the ring gave them.

Revision ID: 0015
Revises: 0014
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "events",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("at", sa.Float, nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("message", sa.Text, nullable=False),
        sa.Column("job_id", sa.Integer),
        sa.Column("owner", sa.Text),
        sa.Column("name", sa.Text),
        sa.Column("gpu", sa.Integer),
    )


def downgrade() -> None:
    op.drop_table("events")
