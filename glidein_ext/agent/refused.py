"""The master's log of the pairs the Task Queue refused (Delgado Peris 2014 §III.C's
``assign``): one line a pair, rate limited.

A master whose rounds keep offering what the Task Queue refuses (a task taken meanwhile, a pilot
the Task Queue still believes busy, a pair that does not match) must say so without flooding the
pilot's log: at most ``REFUSED_BURST`` lines per ``REFUSED_PERIOD``; the pairs past that are
counted, and the count logged when the next period starts.  Pure but for the logger it writes to.

Python 3.9, standard library only.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

REFUSED_BURST = 20  # refused pairs logged one a line per REFUSED_PERIOD; the rest counted
REFUSED_PERIOD = 60.0


class RefusedLog:
    """The refused pairs' lines, at most ``REFUSED_BURST`` a ``REFUSED_PERIOD``."""

    def __init__(self, log: logging.Logger) -> None:
        self._log = log
        self._since = -REFUSED_PERIOD  # the period's start,
        self._logged = 0  # the lines logged in it,
        self._quiet = 0  # and the pairs not logged

    def write(self, refused: Sequence[Any], now: float) -> None:
        """One line per refused pair (``Refused``: the task, the pilot, why) while the period's
        burst lasts; the rest counted."""
        if now - self._since >= REFUSED_PERIOD:
            if self._quiet:
                self._log.info(
                    "master: %d more refused pair(s) in the last %.0f s, not logged",
                    self._quiet,
                    now - self._since,
                )
            self._since = now
            self._logged = 0
            self._quiet = 0
        for item in refused:
            if self._logged >= REFUSED_BURST:
                self._quiet += 1
                continue
            self._logged += 1
            self._log.info(
                "master: the Task Queue refused task %s for pilot %s: %s",
                item.task_id,
                item.pilot_id,
                item.reason,
            )
