"""A model network's routing tables, for the DHT's synchronous tests (no sockets)."""

from __future__ import annotations

import random

from glidein_ext.dht.contact import Contact
from glidein_ext.dht.routing import RoutingTable


def model_tables(ids: list[int], k: int, rng: random.Random) -> dict[int, RoutingTable]:
    """Each node hears from every other in ``rng``'s random order: its buckets (Kademlia
    section 2.2) end up with the ``k`` last seen of each."""
    tables = {}
    for own in ids:
        table = RoutingTable(own, k)
        others = [i for i in ids if i != own]
        rng.shuffle(others)
        for ident in others:
            table.observe(Contact(ident, "h", 1))
        tables[own] = table
    return tables
