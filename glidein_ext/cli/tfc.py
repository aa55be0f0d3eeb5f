"""`glidein-ext tfc`: map LFNs to PFNs and back with a CMS Trivial File Catalog (docs/cache.md)."""

from __future__ import annotations

import click

from glidein_ext.cache.tfc import DEFAULT_DESTINATION, Catalog, load_catalog
from glidein_ext.errors import CatalogError

_catalog = click.option(
    "--catalog",
    "catalog_path",
    required=True,
    type=click.Path(dir_okay=False),
    help="storage.xml or storage.json.",
)
_protocol = click.option(
    "--protocol",
    "protocols",
    required=True,
    multiple=True,
    help="Protocol whose rules apply; repeat or comma-separate to try several in order.",
)
_destination = click.option(
    "--destination",
    default=DEFAULT_DESTINATION,
    show_default=True,
    help="Destination matched against destination-match.",
)
_site = click.option("--site", default=None, help="storage.json: the site entry to use.")
_volume = click.option("--volume", default=None, help="storage.json: the volume entry to use.")


def _load(path: str, site: str | None, volume: str | None, require_store: bool) -> Catalog:
    catalog = load_catalog(path, site=site, volume=volume)
    return Catalog(catalog.lfn_to_pfn_rules, catalog.pfn_to_lfn_rules, require_store)


def _split(protocols: tuple[str, ...]) -> list[str]:
    return [p for item in protocols for p in item.split(",") if p]


@click.group()
def tfc() -> None:
    """The CMS Trivial File Catalog (seed 001, IV.B): storage.xml and storage.json."""


@tfc.command()
@_catalog
@_protocol
@_destination
@_site
@_volume
@click.option(
    "--require-store/--any-lfn",
    default=True,
    show_default=True,
    help="Answer only for LFNs under /store/, as current CMSSW does.",
)
@click.argument("lfns", nargs=-1, required=True)
def lfn2pfn(
    catalog_path: str,
    protocols: tuple[str, ...],
    destination: str,
    site: str | None,
    volume: str | None,
    require_store: bool,
    lfns: tuple[str, ...],
) -> None:
    """Print the PFN of each LFN, one per line; an unmatched LFN is an error."""
    catalog = _load(catalog_path, site, volume, require_store)
    order = _split(protocols)
    for lfn in lfns:
        pfn = catalog.lfn_to_pfn(lfn, order, destination)
        if pfn is None:
            raise CatalogError(f"no lfn-to-pfn rule of protocol {','.join(order)} matches {lfn}")
        click.echo(pfn)


@tfc.command()
@_catalog
@_protocol
@_destination
@_site
@_volume
@click.argument("pfns", nargs=-1, required=True)
def pfn2lfn(
    catalog_path: str,
    protocols: tuple[str, ...],
    destination: str,
    site: str | None,
    volume: str | None,
    pfns: tuple[str, ...],
) -> None:
    """Print the LFN of each PFN, one per line; an unmatched PFN is an error."""
    catalog = _load(catalog_path, site, volume, True)
    order = _split(protocols)
    for pfn in pfns:
        lfn = catalog.pfn_to_lfn(pfn, order, destination)
        if lfn is None:
            raise CatalogError(f"no pfn-to-lfn rule of protocol {','.join(order)} matches {pfn}")
        click.echo(lfn)
