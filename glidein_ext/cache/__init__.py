"""The worker-node data cache (seed 001, IV.B-IV.E; seed 000, III.A): LRU store, cache-per-host
sharing, Trivial File Catalog, peer file server and an experimental storage element.

Nothing is imported here; use the submodules.
"""
