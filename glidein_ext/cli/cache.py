"""`glidein-ext cache`: list a pilot's data cache and evict files from it (docs/cache.md)."""

from __future__ import annotations

import time
from pathlib import Path

import click

from glidein_ext.cache.store import CacheStore, scan_cache
from glidein_ext.errors import CacheError, UsageError
from glidein_ext.escape import shown


@click.group()
def cache() -> None:
    """A pilot's worker-node data cache (Hasham 2011, IV.B-IV.D)."""


@cache.command("ls")
@click.argument("directory", type=click.Path(file_okay=False))
def ls(directory: str) -> None:
    """List cached files, least recently used first: size, links, pinned, last use, LFN.

    Control characters and backslashes in an LFN are printed escaped (\\n, \\x1b, \\\\).
    """
    entries = scan_cache(Path(directory))
    total = 0
    for entry in entries:
        used = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(entry.mtime))
        pin = "pinned" if entry.pinned else "-"
        click.echo(f"{entry.size:>14} {entry.links:>3} {pin:<6} {used} {shown(entry.lfn)}")
        total += entry.size
    click.echo(f"{len(entries)} files, {total} bytes")


@cache.command()
@click.argument("directory", type=click.Path(file_okay=False))
@click.argument("lfns", nargs=-1)
@click.option("--free", "free_bytes", type=int, default=None, help="Evict LRU files to free BYTES.")
@click.option("--all", "evict_all", is_flag=True, help="Evict every file that is not pinned.")
def evict(directory: str, lfns: tuple[str, ...], free_bytes: int | None, evict_all: bool) -> None:
    """Evict the named LFNs, or --free BYTES in LRU order, or --all; pinned files stay."""
    chosen = sum([bool(lfns), free_bytes is not None, evict_all])
    if chosen != 1:
        raise UsageError("give LFNs, --free BYTES or --all (exactly one of them)")
    if free_bytes is not None and free_bytes <= 0:
        raise UsageError("--free must be a positive number of bytes")
    root = Path(directory)
    entries = scan_cache(root)
    total = sum(e.size for e in entries)
    store = CacheStore(root, max(total, 1))
    removed: list[str] = []
    if lfns:
        for lfn in lfns:
            if not store.evict(lfn):
                raise CacheError(f"{shown(lfn)} is not in the cache at {root}")
            removed.append(lfn)
    elif evict_all:
        removed = store.clear()
    else:
        freed = 0
        for entry in store.entries():
            if free_bytes is not None and freed >= free_bytes:
                break
            if entry.pinned:
                continue
            store.evict(entry.lfn)
            removed.append(entry.lfn)
            freed += entry.size
    for lfn in removed:
        click.echo(f"evicted {shown(lfn)}")
