"""What runs inside a glidein, a pilot or on an execute node keeps to Python 3.9 (EL9's python3).

The list of those modules and of their tests is kept once, in pyproject.toml's
[tool.ruff.per-file-target-version] (the "py39" entries; tests/support/py39.py reads it): ruff lints
them with 3.9's rules, the tests here run a static net over the modules and their tests, and
scripts/py39-chroot runs the tests under a real Python 3.9 (CI runs it through scripts/test).  The
tests below also hold the list together: every entry names files, every glidein_ext module a listed
module imports is listed, every listed package has its tests listed, and the chroot runs exactly
the listed tests.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.py39 import check_file, glob_files, newer_constructs

ROOT = Path(__file__).resolve().parents[2]
# Reading pyproject.toml needs tomllib (Python 3.11): under the chroot's 3.9 only the checks of the
# check itself run; the host runs the rest.
needs_tomllib = pytest.mark.skipif(
    sys.version_info < (3, 11), reason="reads pyproject.toml with tomllib (Python 3.11+)"
)
# Packages on the 3.9 list whose tests do not run under 3.9, and why.
TESTS_NOT_ON_PY39 = {"sched": "its tests need numpy and SciPy, which the 3.9 chroot has not"}


def _table() -> list[str]:
    from tests.support.py39 import py39_globs

    return py39_globs(ROOT)


def _files(prefix: str) -> list[Path]:
    from tests.support.py39 import py39_files

    return py39_files(prefix, ROOT)


@needs_tomllib
def test_worker_node_modules_are_python_3_9() -> None:
    files = _files("glidein_ext/")
    assert len(files) > 100
    assert [p for f in files for p in check_file(f)] == []


@needs_tomllib
def test_their_tests_parse_and_run_on_python_3_9() -> None:
    files = _files("tests/")
    assert len(files) > 60
    assert [p for f in files for p in check_file(f)] == []


@needs_tomllib
def test_every_entry_names_files() -> None:
    """A module or a test that moved leaves no stale entry behind."""
    assert [pattern for pattern in _table() if not glob_files(pattern, ROOT)] == []


def _module_of(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported_at_load(path: Path) -> set[str]:
    """The glidein_ext modules a module imports when it is loaded: its top-level import
    statements (not those under ``if TYPE_CHECKING:`` or a ``try``, nor imports inside
    functions, which run on demand, where the caller is no longer the glidein side: the CLI's
    Task Queue commands)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = _module_of(path).rsplit(".", 1)[0] if path.name != "__init__.py" else _module_of(path)
    found: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return {name for name in found if name.split(".")[0] == "glidein_ext"}


@needs_tomllib
def test_every_module_they_import_is_on_the_list() -> None:
    listed = {_module_of(path): path for path in _files("glidein_ext/")}
    every = {_module_of(path) for path in (ROOT / "glidein_ext").rglob("*.py")}
    missing = sorted(
        f"{name} imports {imported}"
        for name, path in listed.items()
        for imported in _imported_at_load(path)
        if imported in every and imported not in listed
    )
    assert missing == []


@needs_tomllib
def test_every_listed_package_has_its_tests_listed() -> None:
    """tests/unit mirrors glidein_ext: the tests of a package on the list run under 3.9 too."""
    tests = {path.relative_to(ROOT).as_posix() for path in _files("tests/unit/")}
    missing = []
    for pattern in _table():
        if not (pattern.startswith("glidein_ext/") and pattern.endswith("/**")):
            continue
        package = pattern[len("glidein_ext/") : -len("/**")]
        if package in TESTS_NOT_ON_PY39:
            continue
        for test in sorted((ROOT / "tests" / "unit" / package).rglob("test_*.py")):
            if test.relative_to(ROOT).as_posix() not in tests:
                missing.append(test.relative_to(ROOT).as_posix())
    assert missing == []


@needs_tomllib
def test_the_chroot_runs_exactly_the_listed_tests() -> None:
    from tests.support.py39 import py39_test_subset

    subset = py39_test_subset(ROOT)
    assert "tests/unit/test_py39.py" in subset
    assert any(path.startswith("tests/unit/agent/") for path in subset)
    printed = subprocess.run(
        [str(ROOT / "scripts" / "py39-chroot"), "subset"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.split()
    assert printed == subset


@pytest.mark.parametrize(
    "source,what",
    [
        ("Value = int | None\n", "X | Y evaluated at run time"),
        ("ok = isinstance(x, int | float)\n", "X | Y evaluated at run time"),
        ("Alias = list[int] | Mapping[str, int]\n", "X | Y evaluated at run time"),
        ("pairs = list(zip(a, b, strict=True))\n", "zip(strict=)"),
        ("@dataclass(slots=True)\nclass A:\n    x: int\n", "dataclass(slots)"),
        ("import itertools\nitertools.pairwise(x)\n", "itertools.pairwise"),
        ("import tomllib\n", "import of tomllib"),
        ("from enum import StrEnum\n", "import of StrEnum"),
        ("async def f():\n    async with asyncio.timeout(1):\n        pass\n", "asyncio.timeout"),
    ],
)
def test_the_check_sees_newer_constructs(source: str, what: str) -> None:
    assert [p.split(": ", 1)[1] for p in newer_constructs(source)] == [what]


def test_the_check_leaves_3_9_code_alone() -> None:
    fine = (
        "from __future__ import annotations\n"
        "from typing import TYPE_CHECKING, Optional, Union\n"
        "if TYPE_CHECKING:\n    from typing import Self\n"
        "try:\n    import tomllib\nexcept ImportError:\n    tomllib = None\n"
        "Value = Optional[Union[int, str]]\n"
        "flags = 1 << 8 | data[0] | os.O_RDONLY\n"
        "def f(x: int | None, y: list[str] | None = None) -> dict[str, int] | None:\n"
        "    z: int | str = 1\n    return isinstance(x, (int, float))\n"
    )
    assert newer_constructs(fine) == []


def test_the_check_refuses_3_10_grammar() -> None:
    with pytest.raises(SyntaxError):
        newer_constructs("match x:\n    case 1:\n        pass\n")
