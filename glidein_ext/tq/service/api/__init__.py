"""The Task Queue's HTTP API: the FastAPI application (``app``), its doors (``guard``: the token
and a bounded body; ``fastpath``: the pilots' hot calls; ``access``: FastAPI's dependencies;
``auth``: who may do what, pure), the wire format (``schemas``) and the calls mounted beside the
pilot protocol (``sites``: the distributed architecture, ``credentials``: per-pilot credentials)."""
