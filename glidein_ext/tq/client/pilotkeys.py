"""Per-pilot keys of a distributed site (beyond Delgado Peris 2014, whose pilots all share the
site key): what a worker and its master tell each other is authenticated by a key only the two
of them hold.

The Task Queue keeps one secret per site that no pilot ever sees (``site_state.pilot_secret``).
At registration a pilot gets its own key, ``pilot_key = HMAC(secret, site, pilot id)``.  The
messages between pilot ``p`` and the master of epoch ``e`` are authenticated with
``epoch_key(pilot_key, e)``: the pilot derives it, the master gets it from the Task Queue (the
claim's answer, and ``sync`` for pilots it has not met), an answer the Task Queue gives only to
the master of that epoch.  A pilot that was master once holds only its old epoch's keys, which no
later master accepts.  Python 3.9, standard library only.
"""

from __future__ import annotations

import hashlib
import hmac

KEY_BYTES = 32


def pilot_key(secret: bytes, site: str, pilot_id: int) -> bytes:
    """The key the Task Queue hands pilot ``pilot_id`` of ``site`` at registration."""
    message = b"pilot\0" + site.encode() + b"\0" + str(pilot_id).encode()
    return hmac.new(secret, message, hashlib.sha256).digest()


def epoch_key(key: bytes, epoch: int) -> bytes:
    """The key shared by the pilot holding ``key`` and the master of ``epoch``."""
    return hmac.new(key, b"epoch\0" + str(epoch).encode(), hashlib.sha256).digest()
