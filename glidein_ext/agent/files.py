"""LFN paths under a directory, and plain-directory file helpers (Hasham 2011 §IV-D).

The agent's cache itself is :class:`glidein_ext.agent.pilot_cache.PilotCache` (a CacheStore); these
helpers work on plain directories (no LRU, no pins).  An LFN ``/store/a/b.dat`` lives at
``<dir>/store/a/b.dat``; :func:`fetch` looks in the own directory, then a neighbour's (hard link),
then the storage element directory; :func:`keep` moves an output in and copies it to the SE.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable
from pathlib import Path

from glidein_ext.errors import TaskQueueError


def lfn_path(root: Path, lfn: str) -> Path:
    """The file for ``lfn`` under ``root``; refuses LFNs that climb out of it."""
    relative = Path(lfn.lstrip("/"))
    if not lfn.strip("/") or ".." in relative.parts:
        raise TaskQueueError(f"unsafe LFN {lfn!r}")
    return root / relative


def _link_or_copy(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp{os.getpid()}")
    try:
        os.link(source, tmp)
    except OSError:
        shutil.copyfile(source, tmp)
    tmp.replace(target)


def fetch(
    lfn: str, cache: Path, neighbours: Iterable[Path], se_dir: Path | None
) -> tuple[Path, str]:
    """Make ``lfn`` present in the own cache; where it came from: cache, host or se."""
    own = lfn_path(cache, lfn)
    if own.is_file():
        return own, "cache"
    for other in neighbours:
        candidate = lfn_path(other, lfn)
        if candidate.is_file():
            _link_or_copy(candidate, own)
            return own, "host"
    if se_dir is not None:
        candidate = lfn_path(se_dir, lfn)
        if candidate.is_file():
            _link_or_copy(candidate, own)
            return own, "se"
    raise TaskQueueError(f"input {lfn} is in no cache and not on the SE")


def keep(produced: Path, lfn: str, cache: Path, se_dir: Path | None) -> None:
    """Move an output into the cache and copy it to the SE (stage-out)."""
    own = lfn_path(cache, lfn)
    own.parent.mkdir(parents=True, exist_ok=True)
    produced.replace(own)
    if se_dir is not None:
        target = lfn_path(se_dir, lfn)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.tmp{os.getpid()}")
        shutil.copyfile(own, tmp)
        tmp.replace(target)


def cached_lfns(cache: Path) -> list[str]:
    """Every LFN in the cache (files only, no temporaries)."""
    if not cache.is_dir():
        return []
    found = []
    for path in cache.rglob("*"):
        if path.is_file() and not path.name.startswith("."):
            found.append("/" + path.relative_to(cache).as_posix())
    return sorted(found)
