"""The worker-node cache runs inside pilots on EL9's Python 3.9 with the standard library only.

Two checks: a static one that always runs (3.9 grammar, the future import, no 3.10+ call or
import), and the cache itself driven by a real Python 3.9 when one is installed (skipped
otherwise): store, temporaries, host sharing, peer server and client over 127.0.0.1, TFC, SE.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.py39 import check_file, find_python39, newer_constructs, run_python39

ROOT = Path(__file__).resolve().parents[3]
PACKAGE = ROOT / "glidein_ext" / "cache"


def test_cache_sources_are_python_3_9() -> None:
    problems = [problem for path in sorted(PACKAGE.glob("*.py")) for problem in check_file(path)]
    assert problems == []


def test_the_static_check_sees_what_it_looks_for() -> None:
    bad = (
        "import tomllib\nfrom typing import Self\n@dataclass(slots=True)\nclass A: pass\n"
        "isinstance(x, int | float)\nzip(a, b, strict=True)\n"
    )
    assert len(newer_constructs(bad)) == 5


SMOKE = r"""
import importlib, logging, os, pkgutil, sys, tempfile, threading
logging.basicConfig(level=logging.ERROR)  # the server's warning of the refused symlink
from pathlib import Path
assert sys.version_info[:2] == (3, 9), sys.version
import glidein_ext.cache as package
for module in pkgutil.iter_modules(package.__path__):
    importlib.import_module("glidein_ext.cache." + module.name)
leaked = sorted(m for m in sys.modules if m.split(".")[0] in {"click", "watchdog", "classad2"})
assert not leaked, leaked

from glidein_ext.cache.checksum import meta_of_file
from glidein_ext.cache.hostshare import HostRegistry, HostShare
from glidein_ext.cache.peer import PeerClient, PeerServer
from glidein_ext.cache.resolve import Resolver, Source
from glidein_ext.cache.se import StorageElement
from glidein_ext.cache.store import CacheStore
from glidein_ext.cache.tfc import parse_storage_xml
from glidein_ext.errors import TransferError

work = Path(tempfile.mkdtemp())
key = b"py39-site-key-0123456789"
a = CacheStore(work / "a", 10**6, fsync=False)
a.insert_bytes("/store/x", b"x" * 1000)
with a.pinned("/store/x"):
    assert CacheStore(work / "a", 10**6, fsync=False).entries()[0].pinned
b = CacheStore(work / "b", 10**6, fsync=False)
registry = HostRegistry(work / "registry")
share_a = HostShare(a, "A", max_space=10**6, min_threshold=0, registry=registry)
share_b = HostShare(b, "B", max_space=10**6, min_threshold=0, registry=registry)
assert share_b.poll().linked == ["/store/x"]

a.insert_bytes("/store/y", bytes(range(256)) * 4)
os.symlink("/etc/passwd", a.path_of("/store/z.tmp"))
with PeerServer(a, key) as server:
    client = PeerClient(key)
    got = client.fetch(server.address, "/store/y", b)
    assert meta_of_file(got) == meta_of_file(a.path_of("/store/y"))
    assert client.fetch_range(server.address, "/store/y", 1, 2) == bytes([1, 2])
    a.evict("/store/y")
    a.insert_bytes("/store/y", b"short")
    os.unlink(a.path_of("/store/y"))
    os.symlink("/etc/passwd", a.path_of("/store/y"))
    try:
        client.fetch(server.address, "/store/y", CacheStore(work / "c", 10**6, fsync=False))
    except TransferError as exc:
        assert "HTTP 403" in str(exc), exc
    else:
        raise AssertionError("a symlink was served")

catalog = parse_storage_xml(
    '<storage-mapping><lfn-to-pfn protocol="direct" path-match="/+(.*)" result="/se/$1"/>'
    "</storage-mapping>"
)
assert catalog.lfn_to_pfn("/store/q", ["direct"]) == "/se/store/q"
se = StorageElement(work / "se", seed=1)
src = work / "src"
src.write_bytes(b"payload")
se.put(src, se.pfn_of("/store/q"))
resolved = Resolver(b, se).resolve("/store/q")
assert resolved.source is Source.SE and resolved.path.read_bytes() == b"payload"
assert share_a.leave() == ["/store/x", "/store/y"] and threading.active_count() == 1
assert not os.path.lexists(a.path_of("/store/y")) and os.path.exists("/etc/passwd")
print("py39 ok")
"""


def test_the_cache_runs_on_python_3_9() -> None:
    python = find_python39()
    if python is None:
        pytest.skip("no Python 3.9 interpreter on this machine")
    done = run_python39(python, "-W", "error", "-c", SMOKE, cwd=ROOT, timeout=120)
    assert (done.returncode, done.stdout, done.stderr) == (0, "py39 ok\n", "")
