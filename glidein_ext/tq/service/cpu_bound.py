"""A long CPU-bound job in a worker thread beside the event loop: a large submission stored
while the loop keeps answering (``/healthz`` within 100 ms; ``tq.service.api.large_submit``).

- The garbage collector is paused.  A 100,000-task submission makes millions of objects (the
  decoded body, the parsed tasks, the rows, the matcher's entries); the collector runs a full
  collection each time the objects it tracks grow by a quarter, and a full collection walks every
  tracked object holding the GIL: on the 2-core machine seven of them, up to 0.37 s each, ran
  during one such submission, and the event loop waited for each.  When the last job ends, the
  objects alive then (the stored workflow's matcher entries, long-lived) are moved out of the
  collector's generations (``gc.freeze``), so no later full collection walks them, and collection
  resumes.  Objects freed by their reference counts (nearly all of a submission's temporaries) are
  freed meanwhile as always; only reference cycles made meanwhile wait, and those still
  unreachable at the end stay allocated (frozen): a handful of small ones per large submission.
- The interpreter's switch interval is shortened (5 ms to 1 ms): a thread that holds the GIL
  without blocking gives it up after that long when another asks for it, and the event loop asks
  once after each socket call while it answers a request.
"""

from __future__ import annotations

import contextlib
import gc
import sys
import threading
from collections.abc import Iterator

SWITCH_INTERVAL = 0.001  # seconds, while a job runs (Python's default: 0.005)

_lock = threading.Lock()
_running = 0  # jobs in progress
_was_enabled = False  # whether collection was on when the first of them began
_interval = 0.005  # the switch interval then


@contextlib.contextmanager
def cpu_bound_job() -> Iterator[None]:
    """Garbage collection paused and the switch interval short for the block (concurrent blocks
    share them); at the last block's end, the live objects frozen, and both as they were."""
    global _running, _was_enabled, _interval
    with _lock:
        if _running == 0:
            _was_enabled = gc.isenabled()
            _interval = sys.getswitchinterval()
            gc.disable()
            sys.setswitchinterval(min(_interval, SWITCH_INTERVAL))
        _running += 1
    try:
        yield
    finally:
        with _lock:
            _running -= 1
            if _running == 0:
                gc.freeze()
                if _was_enabled:
                    gc.enable()
                sys.setswitchinterval(_interval)
