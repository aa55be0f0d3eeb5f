"""Which instance of a pool runs the PilotMonitor: the holder of a PostgreSQL advisory lock.

Every instance of a pool (several ``tq serve`` on one PostgreSQL database, Lee 2003) may be given
the sites file, but only one should submit pilots, or each site would get its pilots several
times over.  Before each pass, an instance asks for a session-level advisory lock on its own
dedicated connection (``pg_try_advisory_lock``, never waiting); the holder keeps the lock, and
the connection, until it dies.  PostgreSQL releases a session's locks when the session ends, so
when the holder is killed its connection closes and another instance takes the role at its next
pass (within ``monitor_interval`` seconds).  A holder whose connection broke has lost the role
and asks again like any other.  SQLite is one instance: it always leads.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

MONITOR_LOCK = 0x7471_706D  # "tqpm": the PilotMonitor role (db.MIGRATION_LOCK is another key)
log = logging.getLogger("glidein_ext.tq.manager.monitor")


class Leadership(Protocol):
    """Whether this instance runs the PilotMonitor now."""

    def held(self) -> bool: ...

    def close(self) -> None: ...


class SoleLeader:
    """One instance (SQLite, or ``tq monitor``): it always leads."""

    def held(self) -> bool:
        return True

    def close(self) -> None:
        return None


class AdvisoryLeader:
    """The PilotMonitor role as a session-level advisory lock on a dedicated connection."""

    def __init__(
        self,
        conninfo: str,
        name: str,
        key: int = MONITOR_LOCK,
        connect: Callable[..., Any] | None = None,
    ) -> None:
        """``connect``: psycopg.connect unless given (psycopg is imported only here: ``tq serve``
        on SQLite never loads it)."""
        if connect is None:
            import psycopg

            connect = psycopg.connect
        self.conninfo = conninfo
        self.name = name
        self.key = key
        self._connect = connect
        self._conn: Any = None
        self._leading = False

    def held(self) -> bool:
        """True if this instance holds the role (taking it if it is free); never waits."""
        import psycopg

        try:
            if self._conn is None or self._conn.closed:
                self._leading = False
                self._conn = self._connect(
                    self.conninfo,
                    autocommit=True,
                    application_name=f"{self.name}-leader"[:63],
                    connect_timeout=5,
                    keepalives=1,
                    keepalives_idle=10,
                    keepalives_interval=5,
                    keepalives_count=3,
                )
            if self._leading:
                self._conn.execute("SELECT 1")  # the session, and with it the lock, is alive
                return True
            row = self._conn.execute("SELECT pg_try_advisory_lock(%s)", (self.key,)).fetchone()
        except psycopg.Error as exc:
            if self._leading:
                log.warning("PilotMonitor: lost the role with the database session: %s", exc)
            else:
                log.warning("PilotMonitor: cannot ask for the role: %s", exc)
            self.close()
            return False
        self._leading = bool(row and row[0])
        if self._leading:
            log.info("PilotMonitor: %s runs the PilotMonitor of the pool", self.name)
        return self._leading

    def close(self) -> None:
        conn, self._conn, self._leading = self._conn, None, False
        if conn is not None:
            import psycopg

            try:
                conn.close()
            except psycopg.Error as exc:
                log.debug("closing the PilotMonitor's lock session: %s", exc)
