"""Text from others made safe for a terminal or a log: one line, no control sequence.

Names, reports and paths come from pilots, tasks and clients; printed or logged as they are, an
``ESC]0;...BEL`` retitles the operator's terminal, an ``ESC[2J`` clears it, and a newline forges a
log line of the sender's choosing.  ``shown`` is the one escaping every display and log line uses.
"""

from __future__ import annotations

import unicodedata

_NAMED_ESCAPES = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_UNPRINTED = {"Cc", "Cf", "Cs", "Zl", "Zp"}  # controls, format (bidi, zero-width), lines


def shown(text: object) -> str:
    """``text`` (``str()`` of it) with backslashes and control, format and line-separator
    characters escaped (``\\n``, ``\\x1b``, ``\\u202e``), so it is one line of output and cannot
    forge others or drive the terminal."""
    name = text if isinstance(text, str) else str(text)
    if name.isprintable() and "\\" not in name:
        return name
    out = []
    for char in name:
        code = ord(char)
        if char in _NAMED_ESCAPES:
            out.append(_NAMED_ESCAPES[char])
        elif unicodedata.category(char) not in _UNPRINTED:
            out.append(char)
        elif code < 0x100:
            out.append(f"\\x{code:02x}")
        elif code < 0x10000:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    return "".join(out)
