"""Alembic migrations of the Task Queue database (run by ``glidein_ext.tq.service.db.migrate``)."""
