"""`glidein-ext tfc`: map LFNs to PFNs and back with a CMS Trivial File Catalog (docs/cache.md)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Optional

import click

from glidein_ext.cache.tfc import DEFAULT_DESTINATION, Catalog, load_catalog
from glidein_ext.errors import CatalogError

# Optional: a runtime alias, evaluated on the worker nodes' Python 3.9.
Convert = Callable[[Catalog, str, Sequence[str], str], Optional[str]]


@dataclass(frozen=True)
class _CatalogOptions:
    """What the shared options name: the catalog file (and its storage.json entry), the protocols
    whose rules apply and the destination."""

    path: str
    protocols: tuple[str, ...]
    destination: str
    site: str | None
    volume: str | None

    def print_mapped(
        self, convert: Convert, rule: str, names: tuple[str, ...], require_store: bool
    ) -> None:
        """Print ``convert(name)`` for each name, one per line; an unmatched name is an error."""
        loaded = load_catalog(self.path, site=self.site, volume=self.volume)
        catalog = Catalog(loaded.lfn_to_pfn_rules, loaded.pfn_to_lfn_rules, require_store)
        order = [p for item in self.protocols for p in item.split(",") if p]
        for name in names:
            mapped = convert(catalog, name, order, self.destination)
            if mapped is None:
                raise CatalogError(f"no {rule} rule of protocol {','.join(order)} matches {name}")
            click.echo(mapped)


def _catalog_options(command: Callable[..., None]) -> Callable[..., None]:
    """--catalog, --protocol, --destination, --site and --volume, shared by both directions: the
    command gets them as one ``_CatalogOptions``, its first argument."""

    @functools.wraps(command)
    def with_catalog(
        catalog_path: str,
        protocols: tuple[str, ...],
        destination: str,
        site: str | None,
        volume: str | None,
        **rest: Any,
    ) -> None:
        command(_CatalogOptions(catalog_path, protocols, destination, site, volume), **rest)

    options = [
        click.option(
            "--catalog",
            "catalog_path",
            required=True,
            type=click.Path(dir_okay=False),
            help="storage.xml or storage.json.",
        ),
        click.option(
            "--protocol",
            "protocols",
            required=True,
            multiple=True,
            help="Protocol whose rules apply; repeat or comma-separate to try several in order.",
        ),
        click.option(
            "--destination",
            default=DEFAULT_DESTINATION,
            show_default=True,
            help="Destination matched against destination-match.",
        ),
        click.option("--site", default=None, help="storage.json: the site entry to use."),
        click.option("--volume", default=None, help="storage.json: the volume entry to use."),
    ]
    decorated: Callable[..., None] = with_catalog
    for option in reversed(options):
        decorated = option(decorated)
    return decorated


@click.group()
def tfc() -> None:
    """The CMS Trivial File Catalog (Hasham 2011, IV.B): storage.xml and storage.json."""


@tfc.command()
@_catalog_options
@click.option(
    "--require-store/--any-lfn",
    default=True,
    show_default=True,
    help="Answer only for LFNs under /store/, as current CMSSW does.",
)
@click.argument("lfns", nargs=-1, required=True)
def lfn2pfn(catalog: _CatalogOptions, require_store: bool, lfns: tuple[str, ...]) -> None:
    """Print the PFN of each LFN, one per line; an unmatched LFN is an error."""
    catalog.print_mapped(Catalog.lfn_to_pfn, "lfn-to-pfn", lfns, require_store)


@tfc.command()
@_catalog_options
@click.argument("pfns", nargs=-1, required=True)
def pfn2lfn(catalog: _CatalogOptions, pfns: tuple[str, ...]) -> None:
    """Print the LFN of each PFN, one per line; an unmatched PFN is an error."""
    catalog.print_mapped(Catalog.pfn_to_lfn, "pfn-to-lfn", pfns, True)
