"""The one door of every site message (beyond Delgado Peris 2014, where any pilot of a site could
speak for any other), pure.

Every sealed message a pilot receives -- as the master (hello, done, bye) or as a worker (assign,
end, resign) -- passes :meth:`Door.admit`, which checks the same things in the same order for
every kind, and answers either the decoded message or why it was refused:

1. **role**: a master takes only what workers send, a worker only what a master sends;
2. **form**: the envelope and its fields (``distributed.codec``);
3. **addressee and epoch**: a master takes only what was sealed for its own epoch; a worker only
   what is addressed to it and sealed by a master of an epoch no older than the newest master it
   has known (:meth:`Door.know_epoch`): a pilot never obeys a master that lost the role, whatever
   key that master still holds;
4. **key**: a master must have the sender's key (else the message is *pending*: held until the
   Task Queue sends the key, :meth:`Door.learn_key`);
5. **seal**: the MAC under that key;
6. **freshness**: the time within the window, a nonce never seen (``dht.replay``);
7. **sender**: a body that names a pilot (hello, done, bye) names the one who sealed it; an
   assignment names the epoch of its envelope.

No I/O, no clock: the caller gives the time.

Python 3.9, standard library only.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Union

from glidein_ext.dht.replay import ReplayGuard, Verdict
from glidein_ext.distributed import codec
from glidein_ext.tq.client import pilotkeys

REPLAY_WINDOW = 60.0  # seconds a sealed message's time may differ from ours (the DHT's window)
EPOCH_KEYS = 64  # a worker's epoch keys remembered


class Role(enum.Enum):
    MASTER = "master"  # takes hello, done, bye
    WORKER = "worker"  # takes assign, end, resign


@dataclass(frozen=True)
class Admitted:
    """A message let in: the decoded message, from (or to) ``pilot_id``, sealed for ``epoch``;
    ``key`` seals the answer to ``nonce``."""

    kind: str
    pilot_id: int
    epoch: int
    nonce: bytes
    key: bytes
    message: Any

    def answer(self, value: Any) -> list[Any]:
        """The sealed answer to this message."""
        return codec.seal_answer(self.key, self.kind, self.nonce, value)


@dataclass(frozen=True)
class Refused:
    """A message not let in, and why (one line for the log); ``quiet``: an ordinary miss (a
    worker's message meant for another master), not worth a line."""

    kind: str
    reason: str
    quiet: bool = False


@dataclass(frozen=True)
class Pending:
    """A master-bound message whose sender's key has not come yet: held until it has."""

    kind: str
    envelope: codec.Envelope


Decision = Union[Admitted, Refused, Pending]  # Python 3.9 at run time: no X | Y


class Door:
    """The checks one pilot makes of every site message it receives in one role."""

    def __init__(
        self,
        role: Role,
        pilot_id: int,
        *,
        epoch: int = 0,
        key: bytes | None = None,
        keys: Mapping[int, bytes] | None = None,
    ) -> None:
        """A master's door: ``epoch`` (its own) and the workers' ``keys`` for that epoch.  A
        worker's door: its registration ``key`` (each epoch's key derives from it) and the
        newest master ``epoch`` it knows (0: none yet)."""
        self.role = role
        self.pilot_id = pilot_id
        self.epoch = epoch
        self.keys: dict[int, bytes] = dict(keys or {})
        self._key = key
        self._epoch_keys: dict[int, bytes] = {}
        self.guard = ReplayGuard(REPLAY_WINDOW)
        if role is Role.WORKER and key is None:
            raise ValueError("a worker's door needs the pilot's key")

    # --- what the door knows -----------------------------------------------------------------

    def know_epoch(self, epoch: int) -> None:
        """A worker heard of (or became) the master of ``epoch``: older masters are refused."""
        self.epoch = max(self.epoch, epoch)

    def learn_key(self, pilot_id: int, key: bytes) -> None:
        """A master got a worker's key for its epoch."""
        self.keys[pilot_id] = key

    def forget_key(self, pilot_id: int) -> bytes | None:
        return self.keys.pop(pilot_id, None)

    def key_for(self, epoch: int) -> bytes:
        """A worker's key with the master of ``epoch``."""
        assert self._key is not None
        key = self._epoch_keys.get(epoch)
        if key is None:
            if len(self._epoch_keys) >= EPOCH_KEYS:
                self._epoch_keys.clear()
            key = self._epoch_keys[epoch] = pilotkeys.epoch_key(self._key, epoch)
        return key

    # --- the door -----------------------------------------------------------------------------

    def admit(self, kind: str, payload: Any, now: float) -> Decision:
        """Let the sealed ``kind`` message in, or say why not (``now``: wall-clock seconds)."""
        taken = codec.TO_MASTER if self.role is Role.MASTER else codec.TO_WORKER
        if kind not in taken:
            return Refused(kind, f"a {self.role.value} takes no {kind}")
        try:
            envelope = codec.unseal(payload, kind)
        except ValueError as exc:
            return Refused(kind, f"malformed: {exc}")
        if self.role is Role.MASTER:
            if envelope.epoch != self.epoch:
                reason = f"sealed for epoch {envelope.epoch}, not {self.epoch}"
                return Refused(kind, reason, quiet=True)
            key = self.keys.get(envelope.pilot_id)
            if key is None:
                return Pending(kind, envelope)
        else:
            if envelope.pilot_id != self.pilot_id:
                return Refused(kind, f"addressed to pilot {envelope.pilot_id}")
            if envelope.epoch < self.epoch:
                return Refused(
                    kind,
                    f"from the master of epoch {envelope.epoch}; the site's master is of "
                    f"epoch {self.epoch}",
                )
            key = self.key_for(envelope.epoch)
        return self._checked(kind, envelope, key, now)

    def held(self, pending: Pending, now: float) -> Decision:
        """A held message, checked now that its sender's key may have come."""
        key = self.keys.get(pending.envelope.pilot_id)
        if key is None:
            return pending
        if pending.envelope.epoch != self.epoch:
            return Refused(pending.kind, f"sealed for epoch {pending.envelope.epoch}")
        return self._checked(pending.kind, pending.envelope, key, now)

    def _checked(self, kind: str, envelope: codec.Envelope, key: bytes, now: float) -> Decision:
        if not codec.authentic(key, kind, envelope):
            return Refused(kind, f"not sealed by pilot {envelope.pilot_id}'s key")
        sender = envelope.pilot_id if self.role is Role.MASTER else envelope.epoch
        verdict = self.guard.check(sender, envelope.nonce, envelope.stamp, now)
        if verdict is not Verdict.FRESH:
            return Refused(kind, verdict.value)
        try:
            message = codec.decode(kind, envelope.body)
        except ValueError as exc:
            return Refused(kind, f"malformed: {exc}")
        named = getattr(message, "pilot_id", envelope.pilot_id)
        if named != envelope.pilot_id:
            return Refused(kind, f"sealed by pilot {envelope.pilot_id}, names pilot {named}")
        if isinstance(message, codec.Assign) and message.epoch != envelope.epoch:
            return Refused(kind, f"names epoch {message.epoch}, sealed for {envelope.epoch}")
        return Admitted(kind, envelope.pilot_id, envelope.epoch, envelope.nonce, key, message)
