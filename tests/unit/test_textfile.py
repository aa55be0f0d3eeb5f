"""Reading an operator's input file whole but bounded: the text, or the caller's error naming the
file (too large, not UTF-8, unreadable)."""

from __future__ import annotations

from pathlib import Path

import pytest

from glidein_ext.errors import CatalogError
from glidein_ext.textfile import read_bounded_text


def test_a_file_within_the_limit_is_read_whole(tmp_path: Path) -> None:
    path = tmp_path / "f.yaml"
    path.write_text("name: é\n", encoding="utf-8")
    assert read_bounded_text(path, 9, CatalogError) == "name: é\n"  # 9 bytes: é is 2


def test_each_refusal_is_the_callers_error_naming_the_file(tmp_path: Path) -> None:
    big, binary = tmp_path / "big", tmp_path / "binary"
    big.write_bytes(b"x" * 11)
    binary.write_bytes(b"ok\xff")
    with pytest.raises(CatalogError, match=f"^the catalog {big} is larger than 10 bytes$"):
        read_bounded_text(big, 10, CatalogError, "the catalog ")
    with pytest.raises(CatalogError, match=r"is not UTF-8 text \(byte 2\)$"):
        read_bounded_text(binary, 10, CatalogError)
    with pytest.raises(CatalogError, match=f"^cannot read {tmp_path}/missing: No such file"):
        read_bounded_text(tmp_path / "missing", 10, CatalogError)
