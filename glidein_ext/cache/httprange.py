"""HTTP ``Range: bytes=...`` for the peer file server (RFC 9110, section 14): pure parsing.

One range is served (``a-b``, ``a-``, ``-n``); a list of ranges or another unit is ignored and
the whole file is sent, which RFC 9110 allows.
"""

from __future__ import annotations

import re

_SINGLE = re.compile(r"^bytes=(\d*)-(\d*)$")


class Unsatisfiable(ValueError):
    """The range does not overlap the file (answer 416)."""


def parse_range(header: str | None, size: int) -> tuple[int, int] | None:
    """(first, last) inclusive for ``header`` on a file of ``size`` bytes; None for "all"."""
    if header is None:
        return None
    match = _SINGLE.match(header.strip())
    if match is None:
        return None
    first_text, last_text = match.groups()
    if not first_text and not last_text:
        return None
    if not first_text:  # suffix: the last n bytes
        n = int(last_text)
        if n == 0 or size == 0:
            raise Unsatisfiable(header)
        return max(0, size - n), size - 1
    first = int(first_text)
    if last_text and int(last_text) < first:
        return None  # syntactically invalid: ignore the header
    if first >= size:
        raise Unsatisfiable(header)
    last = int(last_text) if last_text else size - 1
    return first, min(last, size - 1)
