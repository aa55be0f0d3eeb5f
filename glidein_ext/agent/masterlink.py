"""A pilot's sealed link to the masters of its site (Delgado Peris 2014 §III.B-C).

What a worker and its master tell each other is sealed with the key that only this pilot and the
master of that epoch hold (``agent.messages``, ``tq.client.pilotkeys``): the worker's requests
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

from glidein_ext.agent import messages
from glidein_ext.agent.sitenet import SiteNetwork
from glidein_ext.dht.replay import ReplayGuard, Verdict
from glidein_ext.errors import DhtError
from glidein_ext.sched.election import MasterView
from glidein_ext.tq.client import pilotkeys

log = logging.getLogger("glidein_ext.agent.worker")  # the worker's log
REPLAY_WINDOW = 60.0  # seconds a sealed message's time may differ from ours (the DHT's window)


class MasterLink:
    """Seals this pilot's messages to a master and checks a master's messages to it."""

    def __init__(self, net: SiteNetwork, pilot_id: int, key: bytes) -> None:
        """``key``: the pilot's key from its registration (each epoch's key derives from it)."""
        self.net = net
        self.pilot_id = pilot_id
        self.key = key
        self._epoch_keys: dict[int, bytes] = {}
        self.guard = ReplayGuard(REPLAY_WINDOW)  # the masters' sealed messages

    def key_for(self, epoch: int) -> bytes:
        """The key this pilot shares with the master of ``epoch``."""
        key = self._epoch_keys.get(epoch)
        if key is None:
            if len(self._epoch_keys) > 64:
                self._epoch_keys.clear()
            key = self._epoch_keys[epoch] = pilotkeys.epoch_key(self.key, epoch)
        return key

    async def request(
        self, view: MasterView, kind: str, body: Any, timeout: float | None = None
    ) -> Any:
        """Send the master a sealed message: its answer's value, None (not the master) or
        ``"pending"``; DhtError when no (sealed) answer came."""
        node = self.net.node
        if node is None:
            raise DhtError("the site network is not joined")
        key = self.key_for(view.epoch)
        payload = messages.seal(key, kind, self.pilot_id, view.epoch, body, time.time())
        answer = await node.message(view.address, kind, payload, timeout=timeout)
        if answer is None or answer == messages.PENDING:
            return answer
        try:
            return messages.open_answer(key, kind, payload[2], answer)
        except ValueError as exc:
            raise DhtError(f"{exc} (from {view.address})") from exc

    def opened(self, kind: str, payload: Any) -> tuple[messages.Envelope, bytes] | None:
        """A master's sealed message to this pilot, checked (key, nonce, time); None if not."""
        try:
            envelope = messages.unseal(payload, kind)
        except ValueError as exc:
            log.info("malformed %s: %s", kind, exc)
            return None
        key = self.key_for(envelope.epoch)
        if envelope.pilot_id != self.pilot_id or not messages.authentic(key, kind, envelope):
            log.warning("pilot %s: a %s not sealed by a master: ignored", self.pilot_id, kind)
            return None
        verdict = self.guard.check(envelope.epoch, envelope.nonce, envelope.stamp, time.time())
        if verdict is not Verdict.FRESH:
            log.warning("pilot %s: a %s that is %s: ignored", self.pilot_id, kind, verdict.value)
            return None
        return envelope, key
