"""User priorities from ``condor_userprio`` text output (pure; Sfiligoi 2013: "e.g. by using
condor_status and condor_userprio").

Accepts the default table (``User Name  Effective Priority  Priority Factor ...``, with or
without ``-allusers``) and a plain ``user priority`` per line.  Lines that do not start with a
user name followed by a number (headers, rules, totals) are skipped.
"""

from __future__ import annotations

import re

from glidein_ext.errors import UsageError

_ROW = re.compile(
    r"^\s*([^\s:]+@[^\s]+|[A-Za-z_][\w.@-]*)\s+([0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?)\b"
)
_SKIP = {"number", "user", "last", "----"}


def parse_userprio(text: str, source: str = "<userprio>") -> dict[str, float]:
    """{submitter: effective priority}; UsageError when nothing could be read."""
    prios: dict[str, float] = {}
    for line in text.splitlines():
        match = _ROW.match(line)
        if match is None or match.group(1).lower() in _SKIP:
            continue
        prios[match.group(1)] = float(match.group(2))
    if not prios:
        raise UsageError(f"{source}: no 'user priority' rows found (condor_userprio output?)")
    return prios
