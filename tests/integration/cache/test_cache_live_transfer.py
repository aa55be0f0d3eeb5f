"""tmp/ under a running transfer: opening the store (``glidein-ext cache evict``, a restarted
pilot) removes only the torn writes of dead processes, never a live pilot's transfer.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import glidein_ext
from glidein_ext.cache.store import CacheStore
from tests.support.cli import run_main

# A pilot mid-transfer: half the file written into tmp/, then it waits for a line on stdin.
PILOT = """
import sys
from glidein_ext.cache.store import CacheStore

store = CacheStore(sys.argv[1], 10**6, fsync=False)
with store.writer("/store/live.dat", 8) as out:
    out.write(b"half")
    out.flush()
    print("writing", flush=True)
    sys.stdin.readline()
    out.write(b"done")
print("committed", flush=True)
"""


@pytest.fixture
def pilot(tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    """A second process holding a transfer open in the cache at ``tmp_path``."""
    env = dict(os.environ, PYTHONPATH=str(Path(glidein_ext.__file__).resolve().parents[1]))
    proc = subprocess.Popen(
        [sys.executable, "-c", PILOT, str(tmp_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline() == "writing\n"  # returns "" if the child died first
    yield proc
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=30)


def test_cache_evict_leaves_a_live_pilots_transfer_alone(
    tmp_path: Path, pilot: subprocess.Popen[str], capsys: pytest.CaptureFixture[str]
) -> None:
    (partial,) = os.listdir(tmp_path / "tmp")
    assert partial.startswith(f"{pilot.pid}-")
    code, _, _ = run_main(["cache", "evict", str(tmp_path), "--all"], capsys)
    assert code == 0
    CacheStore(tmp_path, 100, fsync=False)  # a restarted pilot's open, too
    assert os.listdir(tmp_path / "tmp") == [partial]

    out, _ = pilot.communicate("go\n", timeout=30)
    assert (pilot.returncode, out) == (0, "committed\n")
    assert (tmp_path / "data" / "store" / "live.dat").read_bytes() == b"halfdone"
    assert os.listdir(tmp_path / "tmp") == []


def test_a_killed_pilots_torn_write_is_removed_on_open(
    tmp_path: Path, pilot: subprocess.Popen[str]
) -> None:
    assert len(os.listdir(tmp_path / "tmp")) == 1
    pilot.send_signal(signal.SIGKILL)
    assert pilot.wait(timeout=30) == -signal.SIGKILL
    store = CacheStore(tmp_path, 100, fsync=False)
    assert os.listdir(tmp_path / "tmp") == []
    assert "/store/live.dat" not in store
