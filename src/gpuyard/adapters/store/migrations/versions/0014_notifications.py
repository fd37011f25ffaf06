"""Webhooks: settings per user and team (URLs, events, the signing secret) and the delivery
log (each event for each URL, stored before it is sent, retried after a restart).

Revision ID: 0014
Revises: 0013
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "notify_settings",
        sa.Column("kind", sa.String(8), primary_key=True),
        sa.Column("name", sa.String(255), primary_key=True),
        sa.Column("urls", sa.Text, nullable=False, server_default="[]"),
        sa.Column("events", sa.Text, nullable=False, server_default="[]"),
        sa.Column("secret", sa.Text),
        sa.Column("updated_at", sa.Float, nullable=False),
        sa.Column("secret_at", sa.Float),
    )
    op.create_table(
        "notify_deliveries",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("owner", sa.String(255), nullable=False),
        sa.Column("job_id", sa.Integer),
        sa.Column("event", sa.String(16), nullable=False),
        sa.Column("url", sa.Text, nullable=False),
        sa.Column("signer", sa.Text, nullable=False),
        sa.Column("job", sa.Text, nullable=False, server_default="{}"),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
        sa.Column("next_at", sa.Float, nullable=False),
        sa.Column("last_status", sa.Integer),
        sa.Column("last_error", sa.Text, nullable=False, server_default=""),
        sa.Column("updated_at", sa.Float, nullable=False),
    )
    op.create_index(
        "ix_notify_deliveries_owner_created", "notify_deliveries", ["owner", "created_at"]
    )
    op.create_index("ix_notify_deliveries_state", "notify_deliveries", ["state"])


def downgrade() -> None:
    op.drop_index("ix_notify_deliveries_state", table_name="notify_deliveries")
    op.drop_index("ix_notify_deliveries_owner_created", table_name="notify_deliveries")
    op.drop_table("notify_deliveries")
    op.drop_table("notify_settings")
