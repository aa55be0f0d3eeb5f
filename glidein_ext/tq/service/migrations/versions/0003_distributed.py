"""The site DHT and the distributed architecture (Delgado Peris 2014): where each pilot's DHT
node and peer file server listen, the site where each file was produced, and one row per site
with its DHT key and its master (pilot, epoch, last call).

Revision ID: 0003_distributed
Revises: 0002_hardening
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003_distributed"
down_revision = "0002_hardening"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("pilots") as batch:
        batch.add_column(sa.Column("dht_address", sa.String(300), nullable=True))
        batch.add_column(sa.Column("peer_url", sa.String(300), nullable=True))
        batch.create_index("ix_pilots_site", ["site"])
    with op.batch_alter_table("files") as batch:
        batch.add_column(sa.Column("site", sa.String(200), nullable=True))
    op.create_table(
        "site_state",
        sa.Column("site", sa.String(200), primary_key=True),
        sa.Column("dht_key", sa.String(128), nullable=False),
        sa.Column("master_id", sa.Integer, nullable=True),
        sa.Column("epoch", sa.Integer, nullable=False),
        sa.Column("master_seen", sa.Float, nullable=True),
    )


def downgrade() -> None:
    op.drop_table("site_state")
    with op.batch_alter_table("files") as batch:
        batch.drop_column("site")
    with op.batch_alter_table("pilots") as batch:
        batch.drop_index("ix_pilots_site")
        batch.drop_column("peer_url")
        batch.drop_column("dht_address")
