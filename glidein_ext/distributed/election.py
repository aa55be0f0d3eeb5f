"""A pilot's part in electing its site's master (Delgado Peris 2014 §III.B): a silent master is
probed; when it is dead, the successors claim the role at the Task Queue in turn.

The decisions are ``sched.election.Succession``'s (pure); this loop, on the process's event loop,
acts on them: a probe (a ping of the master; when it answers, the pilot makes itself known again
and says hello), or a claim (``tq.client``: the lower-id successors it could not reach ride along;
granted, the pilot becomes the master; refused, it adopts the master the Task Queue names, or
retries shortly).  A Task Queue that forgot or refuses the pilot ends it.

Python 3.9, standard library only.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

from glidein_ext.agent.sitenet import SiteNetwork, parse_address
from glidein_ext.errors import TaskQueueAuthError, TaskQueueError, TaskQueueNotFound
from glidein_ext.sched.election import Action, MasterView, Succession
from glidein_ext.tq.client.client import TqClient
from glidein_ext.tq.client.protocol import Claim, MasterInfo

log = logging.getLogger("glidein_ext.distributed.worker")  # the worker's log


class Election:
    """The election loop of one pilot: probes and claims, as its ``Succession`` says."""

    def __init__(
        self,
        *,
        pilot_id: int,
        site: str,
        client: TqClient,
        net: SiteNetwork,
        succession: Succession,
        stop: threading.Event,
        on_lost: Callable[[], None],
        meet: Callable[[MasterView, bool], Awaitable[None]],
        adopt: Callable[[MasterView], Awaitable[None]],
        become_master: Callable[[int, Any], Awaitable[None]],
    ) -> None:
        """``meet(view, resend)``: say hello to a master; ``adopt(view)``: take the master the
        Task Queue named; ``become_master(epoch, pilots)``: take the role it granted."""
        self.pilot_id = pilot_id
        self.site = site
        self.client = client
        self.net = net
        self.succession = succession
        self.stop = stop
        self.on_lost = on_lost
        self._meet = meet
        self._adopt = adopt
        self._become_master = become_master
        self.addresses: dict[int, tuple[str, int]] = {}  # successors' DHT addresses

    async def run(self) -> None:
        """Probe a silent master; claim the role when it is dead and it is this pilot's turn."""
        while not self.stop.is_set():
            now = time.monotonic()
            action = self.succession.next_action(now)
            if action is Action.PROBE:
                await self._probe()
            elif action is Action.CLAIM:
                await self._claim()
            else:
                await asyncio.sleep(min(0.5, max(0.05, self.succession.waiting_for(now))))

    async def _probe(self) -> None:
        view, node = self.succession.master, self.net.node
        if view is None or node is None:
            return
        if await node.ping(view.address) is None:
            log.info("pilot %s: the master (pilot %s) is silent", self.pilot_id, view.pilot_id)
            self.succession.probe_failed(time.monotonic())
        else:  # alive, but its TaskLists miss us: make ourselves known, and say hello again
            self.succession.probe_answered(time.monotonic())
            self.net.refresh()
            await self._meet(view, False)

    async def _claim(self) -> None:
        node = self.net.node
        if node is None:
            return
        unreachable = []
        for pilot in self.succession.successors:
            if pilot >= self.pilot_id:
                break
            address = self.addresses.get(pilot)
            if address is None or await node.ping(address) is None:
                unreachable.append(pilot)
        claim = Claim(self.pilot_id, tuple(unreachable))
        loop = asyncio.get_running_loop()
        try:
            answer = await loop.run_in_executor(
                None, functools.partial(self.client.claim_master, self.site, claim)
            )
        except TaskQueueNotFound:
            log.warning("pilot %s: the Task Queue forgot it; stopping", self.pilot_id)
            self.on_lost()
            return
        except TaskQueueAuthError as exc:  # revoked: its task is requeued already
            log.warning("pilot %s: the Task Queue refuses it (%s); stopping", self.pilot_id, exc)
            self.on_lost()
            return
        except TaskQueueError as exc:
            log.warning("pilot %s: claiming the master role failed: %s", self.pilot_id, exc)
            return
        if answer.granted and answer.master is not None:
            await self._become_master(answer.master.epoch, answer.pilots)
            return
        dead = self.succession.master
        named = answer.master
        if named is not None and (dead is None or named.epoch > dead.epoch):
            await self._adopt(view_of(named))  # another pilot took it
        # Else the Task Queue still hears the master we found dead (its timeout has not run
        # out) or a lower-id pilot should claim: the claim is retried shortly.


def view_of(master: MasterInfo) -> MasterView:
    """The master the Task Queue named, as the succession knows masters."""
    return MasterView(master.pilot_id, parse_address(master.dht_address), master.epoch)
