"""An operator's input file read whole, but bounded: at most ``limit`` bytes of UTF-8 text.

A workflow, a sites file or a storage catalog is read whole before it is parsed, so a huge or
binary file is refused first; the refusal is one line naming the file, raised as the caller's own
error (``fail(reason)``).
"""

from __future__ import annotations

import os
from collections.abc import Callable

from glidein_ext.errors import GlideinExtError

Fail = Callable[[str], GlideinExtError]


def read_bounded_text(path: str | os.PathLike[str], limit: int, fail: Fail, what: str = "") -> str:
    """The file's text: at most ``limit`` bytes of UTF-8; ``fail(reason)`` is raised otherwise.
    ``what`` names the file in the reasons (``"the catalog "``)."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read(limit + 1)
    except OSError as exc:
        raise fail(f"cannot read {what}{path}: {exc.strerror or exc}") from None
    if len(raw) > limit:
        raise fail(f"{what}{path} is larger than {limit} bytes")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise fail(f"{what}{path} is not UTF-8 text (byte {exc.start})") from None
