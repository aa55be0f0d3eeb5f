"""The real HTCondor pools in the Debian trixie chroot (``scripts/condor-sandbox``), driven from
Python for the tests and the demo: ``pool`` (one pool, glideins joining it, jobs, queries),
``site`` (a site pool with execute nodes and a VO pool its glideins join)."""
