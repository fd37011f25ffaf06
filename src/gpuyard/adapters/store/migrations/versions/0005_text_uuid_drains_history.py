"""TEXT for free text and lists, drains keyed by GPU UUID, indexes for history pages.

Revision ID: 0005
Revises: 0004

PostgreSQL enforces VARCHAR(255), which an out-of-memory reason or a 128-GPU job's GPU list
overflows. The old drain rows knew only a GPU index: they are kept as "index:N" for the server
to map to a UUID from its inventory.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

_WIDENED = ("name", "reason", "gpus", "node")
_INDEXES = {
    "ix_jobs_state_id": ["state", "id"],
    "ix_jobs_owner_id": ["owner", "id"],
    "ix_jobs_owner_state_id": ["owner", "state", "id"],
    "ix_jobs_owner_name_id": ["owner", "name", "id"],
    "ix_jobs_name_id": ["name", "id"],
    "ix_jobs_submitted_at": ["submitted_at"],
    "ix_jobs_ended_at_id": ["ended_at", "id"],
}


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        for column in _WIDENED:
            batch.alter_column(column, type_=sa.Text, existing_type=sa.String(255),
                               existing_nullable=False)  # fmt: skip
        batch.drop_index("ix_jobs_state")  # superseded by (state, id)
    for name, columns in _INDEXES.items():
        op.create_index(name, "jobs", columns)

    op.create_table(
        "gpu_drains_by_uuid",
        sa.Column("gpu_uuid", sa.Text, primary_key=True),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("drained_at", sa.Float, nullable=False),
    )
    op.execute(
        "INSERT INTO gpu_drains_by_uuid (gpu_uuid, reason, source, drained_at)"
        " SELECT 'index:' || CAST(gpu_index AS TEXT), reason, source, drained_at FROM gpu_drains"
    )
    op.drop_table("gpu_drains")
    op.rename_table("gpu_drains_by_uuid", "gpu_drains")


def downgrade() -> None:
    op.create_table(
        "gpu_drains_by_index",
        sa.Column("gpu_index", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("reason", sa.String(255), nullable=False),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("drained_at", sa.Float, nullable=False),
    )
    # Only drains still keyed by index can go back; those keyed by UUID have no index here.
    op.execute(
        "INSERT INTO gpu_drains_by_index (gpu_index, reason, source, drained_at)"
        " SELECT CAST(SUBSTR(gpu_uuid, 7) AS INTEGER), reason, source, drained_at"
        " FROM gpu_drains WHERE gpu_uuid LIKE 'index:%'"
    )
    op.drop_table("gpu_drains")
    op.rename_table("gpu_drains_by_index", "gpu_drains")
    for name in _INDEXES:
        op.drop_index(name, "jobs")
    with op.batch_alter_table("jobs") as batch:
        for column in _WIDENED:
            batch.alter_column(column, type_=sa.String(255), existing_type=sa.Text,
                               existing_nullable=False)  # fmt: skip
        batch.create_index("ix_jobs_state", ["state"])
