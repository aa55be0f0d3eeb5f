"""HTTP ``Range: bytes=...`` for the peer file server (RFC 9110, section 14): pure parsing.

One range is served (``a-b``, ``a-``, ``-n``); a list of ranges or another unit is ignored and
the whole file is sent, which RFC 9110 allows.

Positions are ASCII digits of any length (RFC 9110 sets no bound).  A number of more than
:data:`MAX_DIGITS` significant digits lies beyond any file, so it is taken as :data:`BEYOND`
without converting the text: a header of thousands of digits then gives the RFC's answer
(``first`` past the end: 416; ``last`` or a suffix past the end: up to the end of the file)
instead of Python's ``int()`` digit-limit error.  (Two such positions compare equal: a range
whose both ends lie beyond any file is answered 416.)
"""

from __future__ import annotations

import re

_SINGLE = re.compile(r"^bytes=([0-9]*)-([0-9]*)$")
MAX_DIGITS = 19
BEYOND: int = 10**MAX_DIGITS  # larger than any file size (an off_t is below 2**63)


class Unsatisfiable(ValueError):
    """The range does not overlap the file (answer 416)."""


def _position(text: str) -> int:
    """``text`` (ASCII digits) as a number, or :data:`BEYOND` when it is longer than any size."""
    significant = text.lstrip("0")
    if len(significant) > MAX_DIGITS:
        return BEYOND
    return int(significant or "0")


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
        n = _position(last_text)
        if n == 0 or size == 0:
            raise Unsatisfiable(header)
        return max(0, size - n), size - 1
    first = _position(first_text)
    last = _position(last_text) if last_text else size - 1
    if last_text and last < first:
        return None  # syntactically invalid: ignore the header
    if first >= size:
        raise Unsatisfiable(header)
    return first, min(last, size - 1)
