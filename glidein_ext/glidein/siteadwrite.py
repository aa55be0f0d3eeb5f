"""Writing `.site.ad` (the site's side of the channel; the same atomic writer everywhere)."""

from __future__ import annotations

import os

from glidein_ext.adfile import AdValue, write_ad
from glidein_ext.glidein.sitead import (
    PAYLOAD_DEADLINE,
    SITE_AD_FILE,
    SITE_AD_SCHEMA,
    VACATE_DESIRED,
)


def site_ad_values(vacate: bool, deadline: int | None) -> dict[str, AdValue]:
    """The keys to write: VACATE_DESIRED, and PAYLOAD_DEADLINE only with a vacate request."""
    values: dict[str, AdValue] = {VACATE_DESIRED: vacate}
    if vacate and deadline is not None:
        values[PAYLOAD_DEADLINE] = deadline
    return values


def write_site_ad(directory: str, *, vacate: bool, deadline: int | None = None) -> str:
    """Atomically write ``directory/.site.ad``; returns its path."""
    path = os.path.join(directory, SITE_AD_FILE)
    write_ad(path, site_ad_values(vacate, deadline), SITE_AD_SCHEMA)
    return path
