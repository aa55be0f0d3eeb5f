"""The worker-node data cache (Hasham 2011, IV.B-IV.E; Delgado Peris 2014, III.A): LRU store,
cache-per-host sharing, Trivial File Catalog, peer file server and an experimental storage element.

Nothing is imported here; use the submodules.
"""
