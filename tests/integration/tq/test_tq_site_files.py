"""Files shared through the site DHT (Delgado Peris 2014 §III.A) between real pilots' caches on
127.0.0.1:
published locations, checked peer fetches (a corrupt copy is refused: the next replica, then the
SE), withdrawal when a file leaves a cache, and the origin of each input."""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from glidein_ext.agent.loopthread import LoopThread
from glidein_ext.agent.pilot_cache import PilotCache
from glidein_ext.agent.sitenet import SiteNetwork
from glidein_ext.dht.ids import ID_BITS
from glidein_ext.dht.settings import DhtSettings

KEY = b"site-files-test-key-0123456789abcdef"
LFN = "/store/w1/step0/f0001.dat"
GOOD = b"the real file\n" * 100


@pytest.fixture
def loop() -> Iterator[LoopThread]:
    thread = LoopThread("test-loop").start()
    yield thread
    thread.stop()


def _pilot(
    loop: LoopThread, root: Path, se: Path, pilot_id: int, join: list[str]
) -> tuple[SiteNetwork, str]:
    """A pilot's cache and site network, joined through ``join``; and its DHT address."""
    cache = PilotCache(root, max_space=10_000_000, min_threshold=0, se_dir=se)
    cache.set_pilot_id(pilot_id)
    net = SiteNetwork(loop, cache, settings=DhtSettings(rpc_timeout=0.3))
    address, _url = net.open()
    dht_id = f"{random.Random(pilot_id).getrandbits(ID_BITS):040x}"
    net.join(pilot_id, KEY, dht_id, join)
    return net, address


@pytest.fixture
def site(loop: LoopThread, tmp_path: Path) -> Iterator[list[SiteNetwork]]:
    se = tmp_path / "se"
    se.mkdir()
    nets: list[SiteNetwork] = []
    first: list[str] = []
    try:
        for pilot_id in (1, 2, 3):
            net, address = _pilot(loop, tmp_path / f"pilot{pilot_id}", se, pilot_id, first[:1])
            nets.append(net)
            first.append(address)
        yield nets
    finally:
        for net in nets:
            net.close()


def _corrupt(net: SiteNetwork, lfn: str) -> None:
    path = net.cache.store.path_of(lfn)
    data = bytearray(path.read_bytes())
    data[5] ^= 0xFF  # same size: only the checksum can tell
    path.write_bytes(bytes(data))


def test_a_corrupt_peer_copy_is_refused_for_another_replica_or_the_se(
    site: list[SiteNetwork], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    a, b, c = site
    monkeypatch.setattr("glidein_ext.agent.pilot_cache.random.shuffle", lambda items: None)
    by_pilot = c.locate  # replicas in pilot order: the corrupt one (pilot 1) is tried first
    c.cache.locate = lambda lfn: sorted(by_pilot(lfn), key=lambda r: r.pilot_id)
    for net in (a, b):
        net.cache.store.insert_bytes(LFN, GOOD)
        assert net.publish_cache() == (1, 0)
    assert {r.pilot_id for r in c.locate(LFN)} == {1, 2}
    _corrupt(a, LFN)
    path, origin = c.cache.acquire(LFN)
    assert (origin, path.read_bytes()) == ("peer", GOOD)  # from pilot 2, after pilot 1's refusal
    assert c.cache.peer_failures == 1
    assert c.cache.take_origins() == {"peer": 1}
    # Only the corrupt replica left: the SE's copy.
    only = "/store/w1/step0/f0002.dat"
    (tmp_path / "se" / only.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / "se" / only.lstrip("/")).write_bytes(GOOD)
    a.cache.store.insert_bytes(only, GOOD)
    a.publish_cache()
    _corrupt(a, only)
    path, origin = c.cache.fetch(only)
    assert (origin, path.read_bytes()) == ("se", GOOD)
    assert c.cache.peer_failures == 2


def test_a_file_that_leaves_a_cache_is_withdrawn_from_the_dht(site: list[SiteNetwork]) -> None:
    a, b, c = site
    a.cache.store.insert_bytes(LFN, GOOD)
    b.cache.store.insert_bytes(LFN, GOOD)
    a.publish_cache()
    b.publish_cache()
    assert {r.pilot_id for r in c.locate(LFN)} == {1, 2}
    a.cache.store.evict(LFN)
    assert a.publish_cache() == (0, 1)
    assert [r.pilot_id for r in c.locate(LFN)] == [2]
    assert a.published() == {}
    path, origin = c.cache.fetch(LFN)
    assert origin == "peer" and path.read_bytes() == GOOD
    c.publish_cache()  # the fetched input is a replica too
    assert {r.pilot_id for r in a.locate(LFN)} == {2, 3}


def test_a_reader_looks_again_for_a_location_still_being_published(
    site: list[SiteNetwork], tmp_path: Path
) -> None:
    # The maker publishes while it reports its completion: a reader placed at once may look
    # first.  It looks again before it reads the SE (which has the file too: stage-out).
    a, _, c = site
    on_se = tmp_path / "se" / LFN.lstrip("/")
    on_se.parent.mkdir(parents=True, exist_ok=True)
    on_se.write_bytes(GOOD)
    a.cache.store.insert_bytes(LFN, GOOD)
    assert c.locate(LFN) == []
    publisher = threading.Timer(0.05, a.publish_cache)
    publisher.start()
    try:
        path, origin = c.cache.fetch(LFN)
    finally:
        publisher.join()
    assert (origin, path.read_bytes()) == ("peer", GOOD)
