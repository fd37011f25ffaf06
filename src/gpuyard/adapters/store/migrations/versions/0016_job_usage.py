"""What a job's last run used, as the kernel counted it: its processes' largest resident set
and their CPU time (sacct's MaxRSS and TotalCPU); NULL for jobs that ended before.

Revision ID: 0016
Revises: 0015
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

_BYTE_COUNT = sa.Integer().with_variant(sa.BigInteger(), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("max_rss_kib", _BYTE_COUNT))
        batch.add_column(sa.Column("cpu_time_s", sa.Float))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("cpu_time_s")
        batch.drop_column("max_rss_kib")
