"""Recovery: every earlier run of a job (retries, requeues, preemptions), the Idempotency-Key
of its submit (a retried submit returns the same job), a retry's backoff time, and the
bytes of output a full log disk lost.

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

_BYTE_COUNT = sa.Integer().with_variant(sa.BigInteger(), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("attempts", sa.Text, nullable=False, server_default="[]"))
        batch.add_column(sa.Column("idempotency_key", sa.Text))
        batch.add_column(sa.Column("not_before", sa.Float))
        batch.add_column(
            # 64-bit on PostgreSQL too (its INTEGER is 32-bit: 2 GiB of lost log would not fit)
            sa.Column("log_dropped_bytes", _BYTE_COUNT, nullable=False, server_default="0")
        )
    op.create_index("ix_jobs_owner_idempotency_key", "jobs", ["owner", "idempotency_key"])


def downgrade() -> None:
    op.drop_index("ix_jobs_owner_idempotency_key", table_name="jobs")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("log_dropped_bytes")
        batch.drop_column("not_before")
        batch.drop_column("idempotency_key")
        batch.drop_column("attempts")
