"""`glidein-ext dht node/put/get` as separate processes on 127.0.0.1."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from glidein_ext.dht.contact import parse_address
from glidein_ext.dht.keyfile import load_site_key
from glidein_ext.dht.node import DhtNode

CLI = [sys.executable, "-m", "glidein_ext"]


@pytest.fixture
def key_file(tmp_path: Path) -> Path:
    path = tmp_path / "site.key"
    path.write_text("3f1c0a9e8d7b6a5f4e3d2c1b0a99887766554433\n")
    path.chmod(0o600)
    return path


def start_node(key_file: Path, *join: str) -> tuple[subprocess.Popen[str], str]:
    args = [*CLI, "dht", "node", "--bind", "127.0.0.1:0", "--key-file", str(key_file)]
    for address in join:
        args += ["--join", address]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    first = proc.stdout.readline()
    assert first.startswith("listening on 127.0.0.1:"), first + proc.communicate()[1]
    address = first.split()[2]
    if join:
        assert proc.stdout.readline().startswith("joined through 1 contact(s)")
    return proc, address


def stop(proc: subprocess.Popen[str]) -> str:
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=10)
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    return out


@pytest.fixture
def two_nodes(key_file: Path) -> Iterator[str]:
    first, address = start_node(key_file)
    try:
        second, _ = start_node(key_file, address)
        try:
            yield address
        finally:
            assert "leaving" in stop(second)
    finally:
        assert "leaving" in stop(first)


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=30, check=False)


def test_put_and_get_through_running_nodes(two_nodes: str, key_file: Path) -> None:
    for value in ("pilot1:/cache/f", "pilot2:/cache/f"):
        put = run("dht", "put", "--node", two_nodes, "--key-file", str(key_file), "f", value)
        assert put.returncode == 0, put.stderr
        assert put.stdout.strip() == "stored on 2 node(s)"
    got = run("dht", "get", "--node", two_nodes, "--key-file", str(key_file), "f")
    assert got.returncode == 0, got.stderr
    assert sorted(got.stdout.split()) == ["pilot1:/cache/f", "pilot2:/cache/f"]
    missing = run("dht", "get", "--node", two_nodes, "--key-file", str(key_file), "nope")
    assert missing.returncode == 1
    assert missing.stderr.strip() == "glidein-ext: error: no value stored under 'nope'"


def test_a_wrong_key_gets_nothing(two_nodes: str, tmp_path: Path) -> None:
    other = tmp_path / "other.key"
    other.write_text("a-completely-different-site-key\n")
    got = run("dht", "get", "--node", two_nodes, "--key-file", str(other), "f")
    assert got.returncode == 1
    assert "no DHT contact answered" in got.stderr


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["get", "--node", "127.0.0.1", "k"], 2, "expected HOST:PORT"),
        (["put", "--node", "127.0.0.1:99999", "k", "v"], 2, "port out of range"),
        (["node", "--bind", "nohost"], 2, "expected HOST:PORT"),
        (["node", "--id", "xyz"], 2, "--id"),
    ],
)
def test_bad_input_is_one_line_and_an_exit_code(
    key_file: Path, args: list[str], code: int, message: str
) -> None:
    result = run("dht", *args, "--key-file", str(key_file))
    assert result.returncode == code
    assert result.stderr.startswith("glidein-ext: error:")
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_unreadable_or_short_key_file(tmp_path: Path) -> None:
    missing = run("dht", "get", "--node", "127.0.0.1:1", "--key-file", str(tmp_path / "none"), "k")
    assert missing.returncode == 1
    assert "cannot read the DHT key file" in missing.stderr
    short = tmp_path / "short"
    short.write_text("abc\n")
    result = run("dht", "node", "--key-file", str(short))
    assert result.returncode == 1
    assert "fewer than 16 bytes" in result.stderr


def test_sigterm_hands_on_a_key_larger_than_one_datagram(key_file: Path) -> None:
    # the LEAVE hand-off of a key of ~110 KB used to raise, and the node exited 1.
    values = [f"wn{i:03d}:/cache/".encode().ljust(400, b"x") for i in range(256)]
    first, address = start_node(key_file)
    try:
        second, _ = start_node(key_file, address)
        try:

            async def fill() -> None:
                async with DhtNode(load_site_key(key_file), read_only=True) as client:
                    await client.start("127.0.0.1", 0, maintenance=False)
                    await client.join([parse_address(address)])
                    for value in values:
                        assert await client.put("big", value) == 2

            asyncio.run(fill())
        finally:
            assert "leaving" in stop(second)  # exit 0, no traceback
        got = run("dht", "get", "--node", address, "--key-file", str(key_file), "big")
        assert got.returncode == 0, got.stderr
        assert sorted(got.stdout.encode().split()) == values
    finally:
        stop(first)
