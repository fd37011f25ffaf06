"""Job arrays: each task knows its array (the first task's id, Slurm's %A) and its index.

The workflow fields of a spec (dependency, output paths, kind, notify...) live in the spec's
JSON like every spec field; only what is looked up by is a column.

Revision ID: 0012
Revises: 0011
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("array_job_id", sa.Integer))
        batch.add_column(sa.Column("array_task_id", sa.Integer))
    op.create_index("ix_jobs_array_job_id", "jobs", ["array_job_id", "array_task_id"])


def downgrade() -> None:
    op.drop_index("ix_jobs_array_job_id", table_name="jobs")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("array_task_id")
        batch.drop_column("array_job_id")
