"""`glidein-ext tfc`: map LFNs to PFNs and back with a CMS Trivial File Catalog (docs/cache.md)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Optional, TypeVar

import click

from glidein_ext.cache.tfc import DEFAULT_DESTINATION, Catalog, load_catalog
from glidein_ext.errors import CatalogError

F = TypeVar("F", bound=Callable[..., Any])
# Optional: a runtime alias, evaluated on the worker nodes' Python 3.9.
Convert = Callable[[Catalog, str, Sequence[str], str], Optional[str]]


def _catalog_options(command: F) -> F:
    """--catalog, --protocol, --destination, --site and --volume, shared by both directions."""
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
    for option in reversed(options):
        command = option(command)
    return command


def _print_mapped(
    convert: Convert,
    rule: str,
    names: tuple[str, ...],
    catalog: Catalog,
    protocols: tuple[str, ...],
    destination: str,
) -> None:
    """Print ``convert(name)`` for each name, one per line; an unmatched name is an error."""
    order = [p for item in protocols for p in item.split(",") if p]
    for name in names:
        mapped = convert(catalog, name, order, destination)
        if mapped is None:
            raise CatalogError(f"no {rule} rule of protocol {','.join(order)} matches {name}")
        click.echo(mapped)


def _load(path: str, site: str | None, volume: str | None, require_store: bool) -> Catalog:
    catalog = load_catalog(path, site=site, volume=volume)
    return Catalog(catalog.lfn_to_pfn_rules, catalog.pfn_to_lfn_rules, require_store)


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
    _print_mapped(Catalog.lfn_to_pfn, "lfn-to-pfn", lfns, catalog, protocols, destination)


@tfc.command()
@_catalog_options
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
    _print_mapped(Catalog.pfn_to_lfn, "pfn-to-lfn", pfns, catalog, protocols, destination)
