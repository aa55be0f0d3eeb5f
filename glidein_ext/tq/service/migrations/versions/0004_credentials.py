"""Per-pilot credentials: the ``credentials`` table (the SHA-256 of each secret, its
site, expiry, revocation, the batch job carrying it) and the credential each pilot registered with
(NULL: the shared pilot token, as every pilot stored before).

Revision ID: 0004_credentials
Revises: 0003_distributed
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004_credentials"
down_revision = "0003_distributed"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "credentials",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("site", sa.String(200), nullable=False),
        sa.Column("secret_hash", sa.String(64), nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("expires_at", sa.Float, nullable=True),
        sa.Column("revoked_at", sa.Float, nullable=True),
        sa.Column("note", sa.String(200), nullable=False),
        sa.Column("batch_id", sa.String(200), nullable=True),
        sa.UniqueConstraint("secret_hash", name="uq_credentials_secret_hash"),
    )
    op.create_index("ix_credentials_batch", "credentials", ["batch_id"])
    with op.batch_alter_table("pilots") as batch:
        batch.add_column(sa.Column("credential_id", sa.Integer, nullable=True))
        batch.create_index("ix_pilots_credential", ["credential_id"])


def downgrade() -> None:
    with op.batch_alter_table("pilots") as batch:
        batch.drop_index("ix_pilots_credential")
        batch.drop_column("credential_id")
    op.drop_index("ix_credentials_batch", "credentials")
    op.drop_table("credentials")
