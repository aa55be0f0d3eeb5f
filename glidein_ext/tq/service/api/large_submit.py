"""A large workflow submission, decoded and parsed in a worker process, stored in a thread.

``parse_workflow`` is pure Python: ~12 s for 100,000 tasks on the 2-core machine.  Run in a
thread of the service, it holds the GIL for all of it but the switch interval's gaps, and the
event loop, ``/healthz`` included, waited up to 0.4 s a call.  A body of ``LARGE`` bytes or more
(some 10,000 tasks) is decoded (``json.loads`` of 8 MB is one 0.24 s call of the C decoder that
never gives the GIL up) and parsed in ``SubmissionParser``'s worker process instead.  The worker
hands the parsed tasks back pickled in chunks of ``CHUNK``: the service unpickles them one chunk
at a time (~3 ms each), in the thread that then stores the workflow as a CPU-bound job
(``tq.service.cpu_bound``).  A body that is not JSON, not an object, or not a valid workflow is
answered as the in-thread path answers it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import gc
import json
import multiprocessing
import pickle
import threading
from typing import Any

from glidein_ext.errors import WorkflowError
from glidein_ext.tq.workflow import TaskDef, WorkflowDef, parse_workflow

LARGE = 2**20  # bytes of a body parsed in the worker process
CHUNK = 250  # tasks per pickled chunk

# What the worker answers: ("ok", (the workflow without its tasks, the tasks' pickled chunks)),
# ("json_invalid" | "dict_type", None), or ("workflow", (reason, task, field)).
Parsed = tuple[str, Any]


def parse_body(raw: bytes) -> Parsed:
    """In the worker process: the body decoded and parsed, as described by ``Parsed``; the
    garbage collector off meanwhile (its full collections cost a third of the parse; the body's
    objects are freed by their reference counts)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _parse(raw)
    finally:
        if enabled:
            gc.enable()


def _parse(raw: bytes) -> Parsed:
    try:
        body = json.loads(raw)
    except ValueError:  # not JSON, or not UTF-8
        return "json_invalid", None
    if not isinstance(body, dict):
        return "dict_type", None
    try:
        workflow = parse_workflow(body)
    except WorkflowError as exc:
        return "workflow", (exc.reason, exc.task, exc.field)
    tasks = workflow.tasks
    chunks = [
        pickle.dumps(tasks[start : start + CHUNK], pickle.HIGHEST_PROTOCOL)
        for start in range(0, len(tasks), CHUNK)
    ]
    return "ok", (dataclasses.replace(workflow, tasks=()), chunks)


def workflow_of(parsed: Any) -> WorkflowDef:
    """The worker's "ok" answer as the workflow, its tasks unpickled one chunk at a time (in a
    thread: the event loop gets the GIL between two chunks)."""
    head: WorkflowDef = parsed[0]
    tasks: list[TaskDef] = []
    for chunk in parsed[1]:
        tasks.extend(pickle.loads(chunk))  # noqa: S301 (our own worker's answer)
    return dataclasses.replace(head, tasks=tuple(tasks))


class SubmissionParser:
    """One worker process (started at the first large submission) that decodes and parses the
    large ones, one at a time; ``close`` ends it (the server, when it stops)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pool: concurrent.futures.ProcessPoolExecutor | None = None
        self._closed = False

    async def parse(self, raw: bytes) -> Parsed:
        """``parse_body(raw)`` in the worker process."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor(), parse_body, raw)

    def _executor(self) -> concurrent.futures.ProcessPoolExecutor:
        with self._lock:
            if self._closed:
                raise RuntimeError("the submission parser is closed")
            if self._pool is None:
                context = multiprocessing.get_context("spawn")  # the service runs threads
                self._pool = concurrent.futures.ProcessPoolExecutor(1, mp_context=context)
            return self._pool

    def close(self) -> None:
        with self._lock:
            self._closed = True
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
