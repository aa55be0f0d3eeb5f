"""What runs inside a glidein or on an execute node keeps to Python 3.9 (EL9's python3).

A static net over those modules and their tests (tests/support/py39.py), run everywhere; the
proof is scripts/py39-chroot, which runs the glidein-side test subset under a real Python 3.9 (CI
runs it through scripts/test).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.py39 import check_file, newer_constructs

ROOT = Path(__file__).resolve().parents[2]
TOP_LEVEL = ["adfile", "entry", "config", "timefmt", "procs", "condor", "classads", "errors"]
TOP_LEVEL += ["backoff", "throttle"]  # the Task Queue client's failover and throttle (pilots)
CLI = ["__init__", "cron", "hook", "init", "wrapper", "pilotad", "sitead", "site"]


def worker_node_files() -> list[Path]:
    package = ROOT / "glidein_ext"
    files = [package / "__init__.py", package / "__main__.py"]
    files += [package / f"{name}.py" for name in TOP_LEVEL]
    files += [package / "cli" / f"{name}.py" for name in CLI]
    files += sorted((package / "glidein").glob("*.py")) + sorted((package / "site").glob("*.py"))
    return files


def test_worker_node_modules_are_python_3_9() -> None:
    files = worker_node_files()
    assert len(files) > 40
    assert [p for f in files for p in check_file(f)] == []


def test_their_tests_parse_and_run_on_python_3_9() -> None:
    tests = sorted((ROOT / "tests" / "unit").glob("test_*.py"))
    tests += sorted((ROOT / "tests" / "unit" / "site").glob("test_*.py"))
    tests += sorted((ROOT / "tests" / "support").glob("*.py"))
    assert [p for f in tests for p in check_file(f)] == []


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
