"""A pilot's place in its site's network (Delgado Peris 2014 §III.A): its DHT node and peer file
server.

Before registering, a pilot binds both (the Task Queue records where they listen); the answer
brings the pilot's DHT id, up to k live pilots of the site and the site's key, and the pilot joins
the DHT with them (:meth:`SiteNetwork.join`).  For the pilot's whole life:

- every file in its cache (inputs it fetched, outputs it wrote) is published in the DHT under
  its LFN, the value naming the peer file server and the file's size and adler32
  (:mod:`glidein_ext.agent.locations`); a file that left the cache is withdrawn (REMOVE), so
  nobody is sent to it (:meth:`publish_cache`, after each task; a distributed worker lets it run
  while it reports the task: the lookups and STOREs take a second on a busy site, and the tasks
  that read the outputs are assigned a round later at the earliest, after the Task Queue has the
  completion; one that looks the file up before it is published reads it from the SE);
- :meth:`locate` answers the replicas of an LFN (the pilot cache's third source).

On a normal exit the pilot leaves with LEAVE (its keys handed on), then stops its file server; a
killed pilot simply vanishes, and its values expire or are withdrawn by nobody (readers then fall
back to the next replica or the SE).  The DHT node runs on the process's shared event loop
(:class:`~glidein_ext.agent.loopthread.LoopThread`); the methods here are called from the pilot's
own thread.

Python 3.9, standard library only.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import random
import socket
from collections.abc import Sequence

from glidein_ext.agent.locations import Location, decode
from glidein_ext.agent.loopthread import LoopThread
from glidein_ext.agent.pilot_cache import PilotCache
from glidein_ext.cache.checksum import FileMeta
from glidein_ext.cache.peer import PeerClient, PeerServer
from glidein_ext.dht.node import DhtNode
from glidein_ext.dht.settings import DhtSettings
from glidein_ext.errors import DhtError

log = logging.getLogger("glidein_ext.agent")
CALL_TIMEOUT = 60.0  # seconds a pilot thread waits for a DHT operation at most
SETTLE = 3.0  # seconds after joining before the routing table is refreshed again (up to twice)


def parse_address(text: str) -> tuple[str, int]:
    """``host:port`` (``[v6]:port`` too) to a pair; DhtError if malformed."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise DhtError(f"not a host:port address: {text!r}")
    return host.strip("[]"), int(port)


class SiteNetwork:
    """One pilot's DHT node and peer file server, and what it published."""

    def __init__(
        self,
        loop: LoopThread,
        cache: PilotCache,
        *,
        bind: str = "127.0.0.1",
        settings: DhtSettings | None = None,
    ) -> None:
        self.loop = loop
        self.cache = cache
        self.bind = bind
        self.settings = settings or DhtSettings()
        self.node: DhtNode | None = None
        self.pilot_id = 0
        self._sock: socket.socket | None = None
        # The file server answers nothing until the pilot has the site's key.
        self.peer = PeerServer(cache.store, os.urandom(32), host=bind, port=0)
        self._published: dict[str, bytes] = {}
        self._publishing: concurrent.futures.Future[None] | None = None  # in the background

    # --- life cycle -----------------------------------------------------------------------------

    def open(self) -> tuple[str, str]:
        """Bind the DHT's UDP socket and start the file server: (``host:port``, peer URL)."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            sock.bind((self.bind, 0))
        except OSError as exc:
            sock.close()
            raise DhtError(f"cannot bind UDP {self.bind}: {exc.strerror or exc}") from exc
        self._sock = sock
        host, port = self.peer.start()
        udp_host, udp_port = sock.getsockname()[:2]
        return f"{udp_host}:{udp_port}", f"http://{host}:{port}"

    def join(self, pilot_id: int, key: bytes, dht_id: str, contacts: Sequence[str]) -> int:
        """Start the DHT node with the id and key the Task Queue gave and join through
        ``contacts``; how many answered (0: the site's first pilot, or none alive)."""
        if self._sock is None:
            raise DhtError("open() the site network before joining")
        self.pilot_id = pilot_id
        self.peer.key = key
        self.cache.use_site(self.locate, PeerClient(key))
        node = DhtNode(key, node_id=int(dht_id, 16), settings=self.settings)
        self.node = node
        sock, self._sock = self._sock, None
        self.loop.run(node.start(sock=sock), CALL_TIMEOUT)
        addresses = []
        for text in contacts:
            try:
                addresses.append(parse_address(text))
            except DhtError as exc:
                log.warning("ignoring site contact: %s", exc)
        if not addresses:
            return 0
        try:
            joined = self.loop.run(node.join(addresses), CALL_TIMEOUT)
        except DhtError as exc:
            log.warning("joining the site DHT failed (alone until others join us): %s", exc)
            return 0
        self.loop.spawn(self._settle(node), f"settle-{pilot_id}")
        return joined

    async def _settle(self, node: DhtNode) -> None:
        """Refresh the routing table once more a few seconds after joining: the pilots of a
        site start together, and those that joined meanwhile are then known too (a broadcast
        reaches only the nodes that some routing table holds)."""
        await asyncio.sleep(SETTLE * (1 + random.random()))
        try:
            await node.refresh(force=True)
        except DhtError as exc:
            log.info("refreshing the routing table failed: %s", exc)

    def refresh(self) -> None:
        """Refresh the routing table now (a pilot that the master's TaskLists miss)."""
        if self.node is not None:
            self.loop.spawn(self.node.refresh(force=True), f"refresh-{self.pilot_id}")

    @property
    def address(self) -> tuple[str, int]:
        if self.node is None:
            raise DhtError("the site network is not joined")
        return self.node.address

    def leave(self) -> None:
        """A normal exit: LEAVE (keys handed on, contacts told), then stop serving files."""
        try:
            self.wait_published()
            if self.node is not None:
                self.loop.run(self.node.leave(), CALL_TIMEOUT)
        except (DhtError, concurrent.futures.TimeoutError) as exc:
            log.warning("leaving the site DHT failed: %s", exc)
        finally:
            self.peer.stop()

    def close(self) -> None:
        """Stop without LEAVE (a pre-DHT site's pilot; in tests, what a killed pilot looks
        like)."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        if self._publishing is not None:
            self._publishing.cancel()
            self._publishing = None
        if self.node is not None:
            self.loop.run(self.node.close(), CALL_TIMEOUT)
        self.peer.stop()

    # --- files ----------------------------------------------------------------------------------

    def publish_cache(self, background: bool = False) -> tuple[int, int]:
        """Publish the files that entered the cache, withdraw those that left; (added, gone).
        ``background``: start it and return (the next call, and leaving, wait for it first)."""
        if self.node is None:
            return 0, 0
        self.wait_published()
        metas = self.cache.metas()
        host, port = self.peer.address
        wanted = {
            lfn: Location(self.pilot_id, host, port, meta).encode() for lfn, meta in metas.items()
        }
        added = {lfn: v for lfn, v in wanted.items() if self._published.get(lfn) != v}
        gone = {lfn: v for lfn, v in self._published.items() if wanted.get(lfn) != v}
        if added or gone:
            if background:
                self._publishing = asyncio.run_coroutine_threadsafe(
                    self._apply(added, gone), self.loop.loop
                )
            else:
                self.loop.run(self._apply(added, gone), CALL_TIMEOUT)
        return len(added), len(gone)

    def wait_published(self) -> None:
        """Wait for a publication started in the background (its failure logged)."""
        publishing, self._publishing = self._publishing, None
        if publishing is None:
            return
        try:
            publishing.result(CALL_TIMEOUT)
        except (DhtError, concurrent.futures.TimeoutError) as exc:
            publishing.cancel()
            log.warning("publishing the cache failed: %s", exc)

    async def _apply(self, added: dict[str, bytes], gone: dict[str, bytes]) -> None:
        node = self.node
        assert node is not None
        for lfn, value in gone.items():
            await node.remove(lfn, value)
            self._published.pop(lfn, None)
        for lfn, value in added.items():
            await node.put(lfn, value)
            self._published[lfn] = value

    def locate(self, lfn: str) -> list[Location]:
        """The replicas of ``lfn`` the site DHT knows (other pilots' and maybe our own)."""
        if self.node is None:
            return []
        try:
            values = self.loop.run(self.node.get(lfn), CALL_TIMEOUT)
        except (DhtError, concurrent.futures.TimeoutError) as exc:
            log.warning("DHT lookup of %s failed: %s", lfn, exc)
            return []
        found = []
        for value in values:
            location = decode(value)
            if location is None:
                log.info("ignoring a malformed location of %s in the DHT", lfn)
            else:
                found.append(location)
        return found

    def published(self) -> dict[str, FileMeta]:
        """What this pilot has in the DHT now (tests)."""
        return {lfn: loc.meta for lfn, v in self._published.items() if (loc := decode(v))}
