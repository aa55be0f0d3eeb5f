"""The on-disk layout of a worker-node cache (Hasham 2011 §IV.C-IV.D): the one home of its names.

A cache root holds ``data/`` (an LFN ``/store/a.dat`` at ``data/store/a.dat``), ``tmp/``
(transfers in progress, renamed into ``data/`` when complete) and ``pins/`` (one file per pinned
LFN, naming the pid that pins it).  Other pilots on the host read a neighbour's ``data/`` to
hard-link its files.
"""

from __future__ import annotations

from pathlib import Path

DATA_DIR = "data"
TMP_DIR = "tmp"
PINS_DIR = "pins"


def data_file(root: Path, lfn: str) -> Path:
    """Where ``lfn`` lives in the cache at ``root`` (the LFN is checked by the store)."""
    return root / DATA_DIR / lfn.lstrip("/")
