"""A pool of Task Queue instances over one PostgreSQL database (Lee 2003 §4.2): how an instance
learns what the others changed (``notify``), the courier push of idle pilots' offers
(``courier``, ``courier_pool``) and which instance runs the PilotMonitor (``leader``).  The
matcher kept in step is the store's part ``store.pool``."""
