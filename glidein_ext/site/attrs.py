"""Names the site side publishes (Sfiligoi 2013, "Propagating Pilot Information": "Same syntax, just
prepend PILOT_ to all attribute names")."""

from __future__ import annotations

from glidein_ext.glidein.pilotad import PILOT_AD_SCHEMA

PREFIX = "PILOT_"
# The .pilot.ad keys, prefixed, in schema order.
PILOT_ATTRS: tuple[str, ...] = tuple(PREFIX + key for key in PILOT_AD_SCHEMA.keys)
# Added by the site cron: seconds since the .pilot.ad mtime (the heartbeat), whether that is older
# than the site's limit ("Additional goodies - Heartbeat"), the mtime itself, and why the file
# could not be used ("" when it could).
HEARTBEAT_AGE = "PILOT_HEARTBEAT_AGE"
HEARTBEAT_STALE = "PILOT_HEARTBEAT_STALE"
HEARTBEAT_TIME = "PILOT_HEARTBEAT_TIME"
AD_ERROR = "PILOT_AD_ERROR"
# The site's own request, read back from .site.ad, so that the controller's state lives in the
# pool and survives its restarts.
SITE_VACATE_DESIRED = "SITE_VACATE_DESIRED"
SITE_PAYLOAD_DEADLINE = "SITE_PAYLOAD_DEADLINE"
# Node-wide: the cron ran, how many sandboxes it saw, and its errors.
CRON_OK = "GLIDEIN_EXT_SITE_CRON_OK"
CRON_PILOTS = "GLIDEIN_EXT_SITE_PILOTS"
CRON_ERROR = "GLIDEIN_EXT_SITE_ERROR"

PER_SLOT_ATTRS: tuple[str, ...] = (
    *PILOT_ATTRS,
    HEARTBEAT_AGE,
    HEARTBEAT_STALE,
    HEARTBEAT_TIME,
    AD_ERROR,
    SITE_VACATE_DESIRED,
    SITE_PAYLOAD_DEADLINE,
)
