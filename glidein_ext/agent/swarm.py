"""Several pilot agents in one process (scale tests: hundreds of pilots on a 2-core machine).

Each pilot is a :class:`~glidein_ext.agent.agent.PilotAgent` in a thread of its own (its tasks are
real subprocesses started from that thread, and die with it), with its own work directory, cache,
stop event and, with a site DHT, its own DHT node and peer file server; the pilots share the
process's one event loop (:class:`~glidein_ext.agent.loopthread.LoopThread`), where every DHT
node, every answer to a TaskList and the master's rounds run.  ``glidein-ext pilot run --pilots N``
runs this; a site of hundreds of pilots is split over several such processes.

Python 3.9, standard library only.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Sequence
from pathlib import Path

from glidein_ext.agent.agent import AgentConfig, PilotAgent
from glidein_ext.agent.loopthread import LoopThread
from glidein_ext.agent.report_batcher import ReportBatcher
from glidein_ext.errors import GlideinExtError
from glidein_ext.tq.client.client import TqClient

log = logging.getLogger("glidein_ext.agent")


def swarm_configs(
    base: AgentConfig, count: int, pilots_per_host: int = 1, first: int = 0
) -> list[AgentConfig]:
    """``count`` pilots like ``base``: work directory ``<workdir>/pilot-<i>``, host
    ``<host>-<i // pilots_per_host>`` (pilots of one host share their caches by hard link)."""
    return [
        dataclasses.replace(
            base,
            workdir=Path(base.workdir) / f"pilot-{index:04d}",
            host=f"{base.host}-{index // max(1, pilots_per_host):04d}",
        )
        for index in range(first, first + count)
    ]


class Swarm:
    """Run pilots in threads over one event loop; ``run()`` returns the tasks each ran.
    ``batch_reports``: the pilots' reports ready at once go in one request
    (``agent.report_batcher``)."""

    def __init__(self, configs: Sequence[AgentConfig], batch_reports: bool = False) -> None:
        self.configs = list(configs)
        self.batcher: ReportBatcher | None = None
        if batch_reports and self.configs:
            first = self.configs[0]  # the swarm's pilots share its Task Queue and token
            client = TqClient(first.url, first.token, ca_file=first.settings.ca_file or None)
            self.batcher = ReportBatcher(client.reports)
        self.stops = [threading.Event() for _ in self.configs]
        self.agents: list[PilotAgent] = []
        self.ran = [0] * len(self.configs)
        self.failed = 0
        self.reasons: dict[str, int] = {}  # why pilots failed -> how many
        self._lock = threading.Lock()

    def stop(self) -> None:
        """Every pilot stops the orderly way (SIGTERM)."""
        for event in self.stops:
            event.set()

    def _one(self, index: int, agent: PilotAgent) -> None:
        try:
            self.ran[index] = agent.run()
        except GlideinExtError as exc:  # the TQ down, a refused token: one line, said once
            self._failed(index, str(exc))
        except Exception as exc:  # one pilot's failure never ends its neighbours (logged)
            self._failed(index, f"{type(exc).__name__}: {exc}")
            log.debug("pilot %d of the swarm failed", index, exc_info=exc)

    def _failed(self, index: int, reason: str) -> None:
        """Count a failed pilot; each distinct reason is logged once (N pilots failing alike
        make one line, not N tracebacks)."""
        with self._lock:
            self.failed += 1
            first = reason not in self.reasons
            self.reasons[reason] = self.reasons.get(reason, 0) + 1
        if first:
            log.error("pilot %d of the swarm failed: %s", index, reason)

    def run(self) -> list[int]:
        loop = LoopThread("pilots-loop").start()
        threads = []
        try:
            for index, config in enumerate(self.configs):
                agent = PilotAgent(config, self.stops[index], loop=loop, batcher=self.batcher)
                self.agents.append(agent)
                thread = threading.Thread(
                    target=self._one, args=(index, agent), name=f"pilot-{index}"
                )
                thread.start()
                threads.append(thread)
            for thread in threads:
                thread.join()
        finally:
            self.stop()
            for thread in threads:
                thread.join()
            loop.stop()
        return self.ran
