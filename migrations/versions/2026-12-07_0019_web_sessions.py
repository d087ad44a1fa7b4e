"""Browser sessions: one row per signed-in browser, behind an HttpOnly cookie.

One new table, `amem_web_sessions`; nothing existing changes. A row is keyed by the SHA-256 of
the cookie's random secret and names its subject, roles, lifetime and (in oidc mode) the
provider's refresh and ID tokens, encrypted. The downgrade drops it, which signs every browser
out (API clients with Bearer tokens are not affected).

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from app.db.types import Identifier, document_text, precise_timestamp, short_text

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None

MYSQL_OPTIONS = {"mysql_charset": "utf8mb4", "mariadb_charset": "utf8mb4"}


def upgrade() -> None:
    op.create_table(
        "amem_web_sessions",
        sa.Column("id_hash", Identifier(64), nullable=False),
        sa.Column("subject", Identifier(128), nullable=False),
        sa.Column("roles", short_text(1000), nullable=False),
        sa.Column("created_at", precise_timestamp(), nullable=False),
        sa.Column("expires_at", precise_timestamp(), nullable=False),
        sa.Column("access_expires_at", precise_timestamp(), nullable=True),
        sa.Column("refresh_token", document_text(), nullable=True),
        sa.Column("id_token", document_text(), nullable=True),
        sa.PrimaryKeyConstraint("id_hash", name="pk_amem_web_sessions"),
        **MYSQL_OPTIONS,
    )
    op.create_index("ix_amem_web_sessions_subject", "amem_web_sessions", ["subject"])
    op.create_index("ix_amem_web_sessions_expires_at", "amem_web_sessions", ["expires_at"])


def downgrade() -> None:
    op.drop_index("ix_amem_web_sessions_expires_at", table_name="amem_web_sessions")
    op.drop_index("ix_amem_web_sessions_subject", table_name="amem_web_sessions")
    op.drop_table("amem_web_sessions")
