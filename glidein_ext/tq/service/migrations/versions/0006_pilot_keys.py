"""Per-pilot keys of a distributed site: one secret per site, which no pilot ever sees, from which
the Task Queue derives each pilot's key (``tq.client.pilotkeys``).  Filled at the site's next
registration (``site_state.pilot_secret`` NULL until then).

Revision ID: 0006_pilot_keys
Revises: 0005_pool_notify
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006_pilot_keys"
down_revision = "0005_pool_notify"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("site_state", sa.Column("pilot_secret", sa.String(128), nullable=True))


def downgrade() -> None:
    op.drop_column("site_state", "pilot_secret")
