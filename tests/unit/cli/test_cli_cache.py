"""`glidein-ext tfc` and `glidein-ext cache`: output, exit codes, one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from glidein_ext.cache.store import CacheStore
from glidein_ext.escape import shown
from tests.support.cli import run_main

CATALOG = str(Path(__file__).resolve().parents[2] / "data" / "T1_CH_CERN_storage.xml")


def tfc(
    capsys: pytest.CaptureFixture[str], command: str, protocol: str, *args: str
) -> tuple[int, str, str]:
    """``glidein-ext tfc COMMAND`` on the CERN catalog with ``--protocol PROTOCOL``."""
    return run_main(["tfc", command, "--catalog", CATALOG, "--protocol", protocol, *args], capsys)


def test_lfn2pfn_prints_one_pfn_per_lfn(capsys: pytest.CaptureFixture[str]) -> None:
    names = ["/store/data/a", "/store/user/u/b"]
    code, out, _ = tfc(capsys, "lfn2pfn", "srmv2", "--destination", "T2_CH_CERN", *names)
    assert code == 0
    assert out.splitlines() == [
        "srm://srm-eoscms.cern.ch:8443/srm/v2/server?SFN=/castor/cern.ch/cms/store/data/a",
        "srm://srm-eoscms.cern.ch:8443/srm/v2/server?SFN=/eos/cms/store/user/u/b",
    ]


def test_unmatched_name_is_an_error_line_and_nonzero(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = tfc(capsys, "lfn2pfn", "nosuch", "/store/a")
    assert code == 1 and out == ""
    assert (
        err.strip() == "glidein-ext: error: no lfn-to-pfn rule of protocol nosuch matches /store/a"
    )
    code, _, err = tfc(capsys, "pfn2lfn", "direct", "/x")
    assert code == 1 and "no pfn-to-lfn rule" in err and "Traceback" not in err


def test_pfn2lfn_with_protocol_list(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = tfc(capsys, "pfn2lfn", "nosuch,rfio", "rfio:/castor/cern.ch/cms/store/x")
    assert code == 0 and out == "/store/x\n"


def test_missing_catalog_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_main(
        ["tfc", "lfn2pfn", "--catalog", str(tmp_path / "none.xml"), "--protocol", "p", "/store/a"],
        capsys,
    )
    assert code == 1 and err.startswith("glidein-ext: error: cannot read the catalog")


def test_cache_ls_and_evict(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = CacheStore(tmp_path, 1000, fsync=False)
    store.insert_bytes("/store/a", b"a" * 10)
    store.insert_bytes("/store/b", b"b" * 20)
    store.insert_bytes("/store/c", b"c" * 30)
    store.pin("/store/a")
    code, out, _ = run_main(["cache", "ls", str(tmp_path)], capsys)
    assert code == 0
    lines = out.splitlines()
    assert lines[-1] == "3 files, 60 bytes"
    assert "pinned" in lines[0] and lines[0].endswith("/store/a")
    code, out, _ = run_main(["cache", "evict", str(tmp_path), "--free", "15"], capsys)
    assert code == 0 and out == "evicted /store/b\n"  # a is pinned, b is next LRU
    code, _, err = run_main(["cache", "evict", str(tmp_path), "/store/a"], capsys)
    assert code == 1 and "in use by a running job" in err
    code, _, err = run_main(["cache", "evict", str(tmp_path)], capsys)
    assert code == 2 and "exactly one" in err
    code, out, _ = run_main(["cache", "evict", str(tmp_path), "--all"], capsys)
    assert out == "evicted /store/c\n"
    code, _, err = run_main(["cache", "ls", str(tmp_path / "nope")], capsys)
    assert code == 1 and "not a cache directory" in err


FORGED = [
    "/store/a\n         1   1 -      2020-01-01T00:00:00 /store/forged",  # a fake entry line
    "/store/b\r3 files, 0 bytes",
    "/store/c\x1b[2K\x1b[1Ahidden",  # terminal escapes
    "/store/d\u202egnp.exe",  # right-to-left override
    "/store/e\u2028f",  # line separator
    "/store/back\\nslash",  # a literal backslash-n must not look like an escaped newline
]


def test_cache_ls_prints_control_characters_escaped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = CacheStore(tmp_path, 10_000, fsync=False)
    for lfn in FORGED:
        store.insert_bytes(lfn, b"x")
    code, out, _ = run_main(["cache", "ls", str(tmp_path)], capsys)
    assert code == 0
    lines = out.split("\n")
    assert lines[-2:] == [f"{len(FORGED)} files, {len(FORGED)} bytes", ""]
    assert len(lines) == len(FORGED) + 2  # one line per entry, nothing forged
    listed = {line.rsplit(" ", 1)[-1] for line in lines[:-2] if " /store/" in line}
    assert "/store/a\\n" in out and "/store/forged" in out  # the fake line is inside entry a
    assert "\\x1b[2K\\x1b[1Ahidden" in out and "\\u202egnp.exe" in out and "\\u2028" in out
    assert "/store/back\\\\nslash" in listed
    assert not any(ch in out for ch in "\r\x1b\u202e\u2028")
    code, out, _ = run_main(["cache", "evict", str(tmp_path), "--all"], capsys)
    assert code == 0 and len(out.splitlines()) == len(FORGED)
    assert "evicted /store/c\\x1b[2K\\x1b[1Ahidden" in out.splitlines()


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("/store/plain é ü", "/store/plain é ü"),
        ("/a\tb\x00c\x7fd", "/a\\tb\\x00c\\x7fd"),
        ("/a\x85b\u200bc", "/a\\x85b\\u200bc"),  # C1 NEL, zero-width space
        ("/s\udcffx", "/s\\udcffx"),  # a non-UTF-8 byte in a file name (surrogateescape)
        ("/\U000e0001", "/\\U000e0001"),  # a tag character (format, outside the BMP)
    ],
)
def test_shown_escapes_only_what_could_forge_output(name: str, expected: str) -> None:
    assert shown(name) == expected
