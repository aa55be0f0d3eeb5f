"""Local test beds of real processes on 127.0.0.1, shared by the tests, the benchmarks (bench/)
and whoever measures the product: a ``tq serve`` subprocess (``tq_server``), a site of real pilot
processes running the papers' workflows (``site_runs``), a throw-away PostgreSQL server
(``postgres``), a DHT network in one event loop (``dht_testnet``) and a private certificate
authority made with ``openssl`` (``tls``).  Nothing here runs in production; nothing in the rest of
the package imports it.  The tests import these directly, except PostgreSQL, which they reach
through the fixtures of tests/support/postgres.py (a skip, or a failure in CI, without it).
"""
