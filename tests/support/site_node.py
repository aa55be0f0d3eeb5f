"""A site execute node inside the chroot's site pool, for tests.

The helpers live in :mod:`glidein_ext.sandbox.site` (the demo's site scene uses them too); this
module keeps the tests' import path.
"""

from __future__ import annotations

from glidein_ext.sandbox.site import (
    CHROOT_BIN,
    CHROOT_SRC,
    NODE_ATTR,
    SITE_SNIPPET,
    SiteNode,
    render_node_config,
    start_site_node,
)

__all__ = [
    "CHROOT_BIN",
    "CHROOT_SRC",
    "NODE_ATTR",
    "SITE_SNIPPET",
    "SiteNode",
    "render_node_config",
    "start_site_node",
]
