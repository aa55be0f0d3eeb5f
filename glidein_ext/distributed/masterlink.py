"""A pilot's sealed link to the masters of its site (Delgado Peris 2014 §III.B-C).

What a worker and its master tell each other is sealed with the key that only this pilot and the
master of that epoch hold (``distributed.codec``, ``tq.client.pilotkeys``): the worker's requests
(hello, done, bye) are sealed here and their answers opened (an answer that is not sealed is no
answer: only the real master can say the Task Queue has a completion), and a master's message to
this pilot (an assignment, an ``end``) is checked here: one that is not sealed for it, or that
replays a nonce or falls outside the time window, is refused.

Python 3.9, standard library only.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from glidein_ext.agent.sitenet import SiteNetwork
from glidein_ext.distributed import codec as messages
from glidein_ext.distributed.door import Admitted, Door, Refused, Role
from glidein_ext.errors import DhtError
from glidein_ext.sched.election import MasterView

log = logging.getLogger("glidein_ext.distributed.worker")  # the worker's log


class MasterLink:
    """Seals this pilot's messages to a master; a master's messages to it pass its door."""

    def __init__(self, net: SiteNetwork, pilot_id: int, key: bytes) -> None:
        """``key``: the pilot's key from its registration (each epoch's key derives from it)."""
        self.net = net
        self.pilot_id = pilot_id
        self.door = Door(Role.WORKER, pilot_id, key=key)

    async def request(
        self, view: MasterView, kind: str, body: Any, timeout: float | None = None
    ) -> Any:
        """Send the master a sealed message: its answer's value, None (not the master) or
        ``"pending"``; DhtError when no (sealed) answer came."""
        node = self.net.node
        if node is None:
            raise DhtError("the site network is not joined")
        key = self.door.key_for(view.epoch)
        payload = messages.seal(key, kind, self.pilot_id, view.epoch, body, time.time())
        answer = await node.message(view.address, kind, payload, timeout=timeout)
        if answer is None or answer == messages.PENDING:
            return answer
        try:
            return messages.open_answer(key, kind, payload[2], answer)
        except ValueError as exc:
            raise DhtError(f"{exc} (from {view.address})") from exc

    def opened(self, kind: str, payload: Any) -> Admitted | None:
        """A master's sealed message to this pilot, let in by the door; None if refused."""
        decision = self.door.admit(kind, payload, time.time())
        if isinstance(decision, Admitted):
            return decision
        reason = decision.reason if isinstance(decision, Refused) else "pending"
        log.warning("pilot %s: a %s refused: %s", self.pilot_id, kind, reason)
        return None
