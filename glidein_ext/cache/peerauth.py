"""Authentication of peer file requests: an HMAC over the request with the per-site key.

Delgado Peris 2014 §III.A has every pilot run "a simple file server accepting requests from other
peers";
we serve only the pilots of the same site: each request carries
``Authorization: GlideinExt-HMAC ts=<unix seconds>,sig=<hex HMAC-SHA256>`` computed over
``METHOD\\nPATH\\nTS`` with the site key (the same key file as the site DHT).  A request whose
time stamp is further than ``window`` seconds from the server's clock is refused.  Requests are
reads of immutable cached files, so a replay inside the window gains nothing but the same file.

Pure: no clock, no I/O; callers pass ``now``.
"""

from __future__ import annotations

import hashlib
import hmac
import re

SCHEME = "GlideinExt-HMAC"
DEFAULT_WINDOW = 60.0
_HEADER = re.compile(rf"^{SCHEME} ts=(\d{{1,12}}),sig=([0-9a-f]{{64}})$")


def signature(key: bytes, method: str, path: str, ts: int) -> str:
    message = f"{method}\n{path}\n{ts}".encode()
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def authorization(key: bytes, method: str, path: str, now: float) -> str:
    """The Authorization header value for a request made at ``now``."""
    ts = int(now)
    return f"{SCHEME} ts={ts},sig={signature(key, method, path, ts)}"


def verify(
    key: bytes,
    header: str | None,
    method: str,
    path: str,
    now: float,
    window: float = DEFAULT_WINDOW,
) -> bool:
    """True if ``header`` authenticates ``method path`` at ``now`` under ``key``."""
    if not header:
        return False
    match = _HEADER.match(header.strip())
    if match is None:
        return False
    ts = int(match.group(1))
    if abs(now - ts) > window:
        return False
    return hmac.compare_digest(match.group(2), signature(key, method, path, ts))
