"""The unit tests mirror the package: tests/unit/<part>/ holds the tests of glidein_ext/<part>/ (and
tests/unit/ itself those of the top-level modules), so a part's tests are found where it is."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
UNIT = ROOT / "tests" / "unit"


def test_every_unit_test_directory_is_a_part_of_the_package() -> None:
    directories = sorted(
        path.parent.relative_to(UNIT) for path in UNIT.rglob("test_*.py") if path.parent != UNIT
    )
    assert directories, "no unit test below tests/unit"
    strays = sorted(
        {
            str(part)
            for part in directories
            if not (ROOT / "glidein_ext" / part / "__init__.py").is_file()
        }
    )
    assert strays == []


def test_a_test_named_after_a_part_is_in_that_parts_directory() -> None:
    """test_agent_*.py under tests/unit/agent/, test_cli_*.py under tests/unit/cli/, and so on:
    none left at the top or where another part's tests live."""
    parts = {path.parent.name for path in (ROOT / "glidein_ext").glob("*/__init__.py")}
    misplaced = []
    for path in UNIT.rglob("test_*.py"):
        named = path.name.split("_")[1]
        where = path.relative_to(UNIT).parts
        if named in parts and where[0] != named:
            misplaced.append("/".join(where))
    assert sorted(misplaced) == []


def test_no_two_test_files_share_a_name() -> None:
    """pytest imports the test files by their names (rootdir-based, no packages): two files of one
    name anywhere under tests/ stop the whole collection."""
    seen: dict[str, list[str]] = {}
    for path in (ROOT / "tests").rglob("test_*.py"):
        seen.setdefault(path.name, []).append(str(path.relative_to(ROOT)))
    assert {name: paths for name, paths in seen.items() if len(paths) > 1} == {}
