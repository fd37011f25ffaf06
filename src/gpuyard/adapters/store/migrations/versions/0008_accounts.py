"""Accounts: teams, users (role, team, Unix user, disabled) and API tokens (their SHA-256,
never the secret), so every person is themselves.

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "teams",
        sa.Column("name", sa.String(255), primary_key=True),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    op.create_table(
        "users",
        sa.Column("name", sa.String(255), primary_key=True),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("team", sa.String(255), sa.ForeignKey("teams.name"), nullable=False),
        sa.Column("unix_user", sa.String(255)),
        sa.Column("disabled", sa.Boolean, nullable=False, server_default="0"),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    op.create_table(
        "api_tokens",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("token_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("user_name", sa.String(255), sa.ForeignKey("users.name"), nullable=False),
        sa.Column("scope", sa.String(16), nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("expires_at", sa.Float),
        sa.Column("last_used_at", sa.Float),
        sa.Column("revoked_at", sa.Float),
        sqlite_autoincrement=True,
    )


def downgrade() -> None:
    op.drop_table("api_tokens")
    op.drop_table("users")
    op.drop_table("teams")
