"""Strict reading of the fields of a decoded JSON object, shared by the glidein's readers of JSON:
``glidein.json`` (``glidein.info``) and the hook link's requests (``glidein.handoff.server``).
Pure, Python 3.9, standard library only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def optional_int(data: Mapping[str, Any], key: str) -> int | None:
    """``data[key]``: an int, or None when absent or null; ValueError for anything else (a bool
    is no integer)."""
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"field {key!r} must be an integer or null")
    return value
