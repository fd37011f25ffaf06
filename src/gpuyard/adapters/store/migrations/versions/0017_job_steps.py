"""The `srun` steps of a job's last run (sacct's `JOBID.0`, `JOBID.1` rows), one JSON column
like `attempts`: read and written with the job, at most MAX_STEPS of them; `[]` for jobs that
ended before.

Revision ID: 0017
Revises: 0016
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("steps", sa.Text, nullable=False, server_default="[]"))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("steps")
