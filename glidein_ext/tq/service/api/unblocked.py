"""Store calls from the event loop that never wait there for the store's lock.

The store serialises this process's transactions with one lock (``tq.service.store.core``).  A
transaction may hold it for seconds (a 100,000-task submission, in a worker thread); an async
handler that called the store directly would then wait for it on the event loop, and every other
call, ``/healthz`` included, with it.  ``unblocked`` runs the call at once while the lock is free
(the common case: no thread hop) and in a worker thread while another thread holds it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from glidein_ext.tq.service.store import Store

P = ParamSpec("P")
R = TypeVar("R")


async def unblocked(store: Store, work: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
    """``work`` (one of ``store``'s transactions), called from the event loop without ever
    waiting there for the store's lock."""
    lock = store.lock
    if lock.acquire(blocking=False):
        try:
            return work(*args, **kwargs)
        finally:
            lock.release()
    return await asyncio.to_thread(work, *args, **kwargs)
