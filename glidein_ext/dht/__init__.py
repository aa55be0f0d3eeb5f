"""The site DHT: Kademlia with the changes of Delgado Peris 2014, section III.A and III.B.

Pilots of one site form a Kademlia network (Maymounkov & Mazieres, 2002) over UDP:

- ``ids``, ``contact``: 160-bit identifiers and the XOR metric (Kademlia section 2.1).
- ``routing``: k-buckets with least-recently-seen expiration (Delgado Peris 2014 §III.A).
- ``lookup``: the iterative node lookup (Kademlia section 2.3), as a pure state machine.
- ``storage``: values that append and deduplicate per key, with owner and expiry
  (Delgado Peris 2014 §III.A).
- ``regions``, ``aggregation``: broadcast over eight regions, reply aggregation
  (Delgado Peris 2014 §III.B).
- ``wire``, ``protocol``, ``replay``: authenticated messages (a struct header and a compact body
  encoding, standard library only) with a replay window (beyond the paper).
- ``handler``: the answers to requests, synchronous.
- ``rpc``, ``caller``, ``broadcaster``, ``node``: the asyncio edges; ``caller`` also notices dead
  contacts (beyond the paper).

Python 3.9 and the standard library only: it runs inside the pilots.

Nothing happens at import.
"""

from __future__ import annotations
