"""adfile: the safe reader and the atomic writer (Sfiligoi 2013 files cross a trust boundary)."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from glidein_ext.adfile import (
    INT64_MAX,
    INT64_MIN,
    MAX_AD_BYTES,
    Kind,
    Schema,
    format_ad,
    parse_ad_text,
    read_ad,
    read_ad_with_stat,
    write_ad,
)
from glidein_ext.errors import AdFileError, AdFileMissing
from glidein_ext.glidein.pilotad import PILOT_AD_SCHEMA
from glidein_ext.glidein.sitead import SITE_AD_SCHEMA

SCHEMA = Schema("test.ad", {"COUNT": Kind.INT, "FLAG": Kind.BOOL, "WHEN": Kind.INT})


def write(path: Path, data: bytes | str) -> str:
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return str(path)


def test_reads_ints_bools_comments_and_crlf(tmp_path: Path) -> None:
    text = "# a comment\r\n\r\nCOUNT = 42\r\n  flag=TRUE  \r\nWhen = -7\r\n"
    assert read_ad(write(tmp_path / "a", text), SCHEMA) == {"COUNT": 42, "FLAG": True, "WHEN": -7}


@pytest.mark.parametrize("literal,expected", [("true", True), ("False", False), ("TRUE", True)])
def test_booleans_are_case_insensitive(tmp_path: Path, literal: str, expected: bool) -> None:
    assert read_ad(write(tmp_path / "a", f"FLAG = {literal}\n"), SCHEMA) == {"FLAG": expected}


@pytest.mark.parametrize(
    "content,reason,line",
    [
        ("COUNT = time() + 10\n", "expected an integer literal", 1),
        ('COUNT = "42"\n', "expected an integer literal", 1),
        ("FLAG = 1\n", "expected a boolean literal", 1),
        ("FLAG = true || false\n", "expected a boolean literal", 1),
        ("COUNT = 1\nRequirements = true\n", "unknown key 'Requirements'", 2),
        ("START = true\n", "unknown key 'START'", 1),
        ("COUNT = 1\ncount = 2\n", "duplicate key COUNT", 2),
        ("COUNT 1\n", "not a 'key = value' line", 1),
        ("COUNT = 99999999999999999999\n", "64-bit range", 1),
        ("COUNT = 0x10\n", "expected an integer literal", 1),
        ("COUNT = 1.5\n", "expected an integer literal", 1),
        ("COUNT = 1 # trailing comment\n", "expected an integer literal", 1),
        ("COUNT = \n", "expected an integer literal", 1),
        ("[ COUNT = 1 ]\n", "not a 'key = value' line", 1),
    ],
)
def test_rejects_everything_but_known_literal_keys(
    tmp_path: Path, content: str, reason: str, line: int
) -> None:
    path = write(tmp_path / "bad.ad", content)
    with pytest.raises(AdFileError) as info:
        read_ad(path, SCHEMA)
    assert reason in str(info.value)
    assert info.value.line == line
    assert str(info.value).startswith(f"{path}:{line}: ")
    assert "\n" not in str(info.value)


def test_nul_byte_is_rejected_with_its_line(tmp_path: Path) -> None:
    path = write(tmp_path / "nul.ad", b"COUNT = 1\nFLAG = tr\x00ue\n")
    with pytest.raises(AdFileError, match="NUL byte") as info:
        read_ad(path, SCHEMA)
    assert info.value.line == 2


def test_invalid_utf8_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(AdFileError, match="UTF-8"):
        read_ad(write(tmp_path / "u.ad", b"COUNT = 1\n\xff\xfe\n"), SCHEMA)


def test_int64_bounds(tmp_path: Path) -> None:
    text = f"COUNT = {INT64_MAX}\nWHEN = {INT64_MIN}\n"
    assert read_ad(write(tmp_path / "a", text), SCHEMA) == {"COUNT": INT64_MAX, "WHEN": INT64_MIN}
    with pytest.raises(AdFileError, match="64-bit"):
        read_ad(write(tmp_path / "b", f"COUNT = {INT64_MAX + 1}\n"), SCHEMA)


def test_symlink_is_refused_even_to_a_good_file(tmp_path: Path) -> None:
    target = write(tmp_path / "good.ad", "COUNT = 1\n")
    link = tmp_path / "link.ad"
    link.symlink_to(target)
    with pytest.raises(AdFileError, match="symbolic link"):
        read_ad(str(link), SCHEMA)


def test_fifo_is_refused_without_hanging(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo.ad"
    os.mkfifo(fifo)
    outcome: list[BaseException | None] = []

    def attempt() -> None:
        try:
            read_ad(str(fifo), SCHEMA)
            outcome.append(None)
        except AdFileError as exc:
            outcome.append(exc)

    worker = threading.Thread(target=attempt, daemon=True)
    worker.start()
    worker.join(timeout=10)
    assert not worker.is_alive(), "reading a FIFO hung"
    assert isinstance(outcome[0], AdFileError)
    assert "FIFO" in str(outcome[0])


def test_directory_is_refused(tmp_path: Path) -> None:
    (tmp_path / "dir.ad").mkdir()
    with pytest.raises(AdFileError, match="directory"):
        read_ad(str(tmp_path / "dir.ad"), SCHEMA)


def test_oversized_file_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path / "big.ad", "# x\n" * (MAX_AD_BYTES // 4 + 1))
    with pytest.raises(AdFileError, match="limit"):
        read_ad(path, SCHEMA)


def test_missing_file_is_its_own_error(tmp_path: Path) -> None:
    with pytest.raises(AdFileMissing):
        read_ad(str(tmp_path / "none.ad"), SCHEMA)


def test_writer_is_atomic_and_sets_mtime(tmp_path: Path) -> None:
    path = str(tmp_path / ".pilot.ad")
    write_ad(path, {"COUNT": 3, "FLAG": False}, SCHEMA, mtime=1_700_000_000)
    values, st_ = read_ad_with_stat(path, SCHEMA)
    assert values == {"COUNT": 3, "FLAG": False}
    assert int(st_.st_mtime) == 1_700_000_000
    assert stat.S_IMODE(st_.st_mode) == 0o644
    assert sorted(os.listdir(tmp_path)) == [".pilot.ad"], "no temporary file left behind"


def test_writer_replaces_a_symlink_instead_of_following_it(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    link = tmp_path / ".site.ad"
    link.symlink_to(victim)
    write_ad(str(link), {"FLAG": True}, SCHEMA)
    assert victim.read_text() == "precious\n"
    assert not link.is_symlink()
    assert read_ad(str(link), SCHEMA) == {"FLAG": True}


def test_writer_refuses_unknown_keys_and_wrong_types(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown"):
        write_ad(str(tmp_path / "a"), {"START": True}, SCHEMA)
    with pytest.raises(ValueError, match="boolean"):
        write_ad(str(tmp_path / "a"), {"FLAG": 1}, SCHEMA)
    with pytest.raises(ValueError, match="integer"):
        write_ad(str(tmp_path / "a"), {"COUNT": True}, SCHEMA)
    assert not (tmp_path / "a").exists()


def test_writer_error_is_translated(tmp_path: Path) -> None:
    with pytest.raises(AdFileError, match="temporary file"):
        write_ad(str(tmp_path / "missing-dir" / "a"), {"COUNT": 1}, SCHEMA)


def test_schemas_of_the_two_files() -> None:
    assert len(PILOT_AD_SCHEMA.keys) == 10
    assert set(SITE_AD_SCHEMA.keys) >= {"VACATE_DESIRED", "PAYLOAD_DEADLINE"}


values_strategy = st.fixed_dictionaries(
    {},
    optional={
        "COUNT": st.integers(min_value=INT64_MIN, max_value=INT64_MAX),
        "FLAG": st.booleans(),
        "WHEN": st.integers(min_value=INT64_MIN, max_value=INT64_MAX),
    },
)


@given(values_strategy)
def test_property_write_then_read_round_trips(values: dict[str, int | bool]) -> None:
    assert parse_ad_text(format_ad(values, SCHEMA), SCHEMA) == values


@given(st.text(max_size=300))
@settings(max_examples=400)
def test_property_any_text_parses_to_literals_or_one_clear_error(text: str) -> None:
    try:
        values = parse_ad_text(text, SCHEMA)
    except AdFileError as exc:
        assert "\n" not in str(exc)
        return
    for key, value in values.items():
        assert key in SCHEMA.keys
        if SCHEMA.keys[key] is Kind.BOOL:
            assert isinstance(value, bool)
        else:
            assert isinstance(value, int) and not isinstance(value, bool)
            assert INT64_MIN <= value <= INT64_MAX


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["COUNT", "count", "FLAG", "flag", "WHEN", "Requirements", "START"]),
            st.sampled_from(["1", "-5", "true", "FALSE", "time()", '"s"', "1+1", "undefined"]),
            st.sampled_from(["\n", "\r\n"]),
        ),
        max_size=6,
    )
)
def test_property_lines_of_keys_and_values(lines: list[tuple[str, str, str]]) -> None:
    text = "".join(f"{k} = {v}{end}" for k, v, end in lines)
    try:
        values = parse_ad_text(text, SCHEMA)
    except AdFileError:
        return
    # Accepted only if every line was a known key with a literal of its type.
    for key, literal, _ in lines:
        canonical = SCHEMA.canonical(key)
        assert canonical is not None
        if SCHEMA.keys[canonical] is Kind.BOOL:
            assert literal.lower() in ("true", "false")
        else:
            assert literal.lstrip("-").isdigit()
    assert len(values) == len(lines)
