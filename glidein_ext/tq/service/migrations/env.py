"""Alembic environment: runs on the connection ``glidein_ext.tq.service.db.migrate`` hands over."""

from __future__ import annotations

from alembic import context

from glidein_ext.tq.service.tables import metadata

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
