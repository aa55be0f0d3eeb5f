"""Reading the per-site key that authenticates DHT messages (beyond the paper).

The key file holds at least 16 bytes (surrounding whitespace is ignored, so a line of hex or
base64 from ``openssl rand -hex 32`` works as is).  It should be readable by the pilot only.
"""

from __future__ import annotations

import os
from pathlib import Path

from glidein_ext.errors import ConfigError

MIN_KEY_BYTES = 16
MAX_KEY_FILE_BYTES = 4096


def load_site_key(path: str | os.PathLike[str]) -> bytes:
    """The key in ``path``; raises ConfigError when it is missing, unreadable or too short."""
    where = Path(path)
    try:
        with where.open("rb") as handle:
            data = handle.read(MAX_KEY_FILE_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"cannot read the DHT key file {where}: {exc.strerror or exc}") from exc
    if len(data) > MAX_KEY_FILE_BYTES:
        raise ConfigError(f"the DHT key file {where} is larger than {MAX_KEY_FILE_BYTES} bytes")
    key = data.strip()
    if len(key) < MIN_KEY_BYTES:
        raise ConfigError(f"the DHT key file {where} holds fewer than {MIN_KEY_BYTES} bytes")
    return key
