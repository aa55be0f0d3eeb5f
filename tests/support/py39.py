"""A static check that a module can run on Python 3.9 (the worker nodes' python3 on EL9).

It parses with the 3.9 grammar and looks for what that grammar accepts but 3.9 fails on at run
time: ``X | Y`` outside annotations, ``zip(strict=)``, ``dataclass(slots=/kw_only=)``,
``itertools.pairwise``, ``asyncio.timeout``/``TaskGroup`` and imports of names newer than 3.9.  It
is a quick net that runs everywhere; the real proof is the test subset run by a real Python 3.9
(scripts/py39-chroot).
"""

from __future__ import annotations

import ast
import glob
import importlib
import os
import shutil
import subprocess
from pathlib import Path

NEWER_NAMES = {
    "tomllib",
    "StrEnum",
    "TaskGroup",
    "Self",
    "TypeAlias",
    "ParamSpec",
    "TypeGuard",
    "Concatenate",
    "Never",
    "assert_never",
    "LiteralString",
    "NotRequired",
    "Required",
    "UTC",
}
NEWER_ATTRIBUTES = {
    ("asyncio", "timeout"),
    ("asyncio", "TaskGroup"),
    ("itertools", "pairwise"),
    ("datetime", "UTC"),
    ("enum", "StrEnum"),
    ("typing", "Self"),
    ("typing", "TypeAlias"),
    ("contextlib", "aclosing"),
    ("contextlib", "chdir"),
}
BUILTIN_TYPES = {"int", "float", "str", "bytes", "bool", "list", "dict", "tuple", "set", "object"}


def _annotation_nodes(tree: ast.AST) -> set[int]:
    """ids of every node inside an annotation (not evaluated under the future import)."""
    roots: list[ast.AST] = []
    for node in ast.walk(tree):
        annotation = getattr(node, "annotation", None)  # AnnAssign and function arguments
        if isinstance(node, (ast.AnnAssign, ast.arg)) and annotation is not None:
            roots.append(annotation)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.returns:
            roots.append(node.returns)
    return {id(sub) for root in roots for sub in ast.walk(root)}


def _not_run_nodes(tree: ast.AST) -> set[int]:
    """ids of nodes Python 3.9 never runs or where an ImportError is expected: ``if
    TYPE_CHECKING:`` blocks and the bodies of ``try: ... except ImportError``."""
    roots: list[ast.AST] = []
    for node in ast.walk(tree):
        type_checking = isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING"
        guarded = isinstance(node, ast.Try) and any(
            getattr(handler.type, "id", "") in {"ImportError", "ModuleNotFoundError"}
            for handler in node.handlers
        )
        if type_checking or guarded:
            roots += getattr(node, "body", [])
    return {id(sub) for root in roots for sub in ast.walk(root)}


def _is_type_operand(node: ast.AST) -> bool:
    """None, a builtin type or a subscripted generic (``list[int]``, ``Sequence[str]``)."""
    if isinstance(node, ast.Constant) and node.value is None:
        return True
    if isinstance(node, ast.Name) and node.id in BUILTIN_TYPES:
        return True
    if isinstance(node, ast.Subscript):
        base = node.value
        name = getattr(base, "id", getattr(base, "attr", ""))
        return name in BUILTIN_TYPES or name[:1].isupper()
    return False


def newer_constructs(source: str, filename: str = "<source>") -> list[str]:
    """What in ``source`` needs Python 3.10 or newer; [] if nothing (SyntaxError if 3.9 cannot
    parse it)."""
    tree = ast.parse(source, filename, feature_version=(3, 9))
    skip = _annotation_nodes(tree) | _not_run_nodes(tree)
    found = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Call):
            name = getattr(node.func, "id", getattr(node.func, "attr", ""))
            keywords = {k.arg for k in node.keywords if k.arg}
            if name == "zip" and "strict" in keywords:
                found.append(f"line {line}: zip(strict=)")
            if name == "dataclass" and keywords & {"slots", "kw_only", "match_args"}:
                found.append(f"line {line}: dataclass({', '.join(sorted(keywords))})")
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            if _is_type_operand(node.left) or _is_type_operand(node.right):
                found.append(f"line {line}: X | Y evaluated at run time")
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names = {alias.name for alias in node.names}
            if isinstance(node, ast.ImportFrom) and node.module:
                names.add(node.module)
            found += [f"line {line}: import of {name}" for name in sorted(names & NEWER_NAMES)]
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and (node.value.id, node.attr) in NEWER_ATTRIBUTES
        ):
            found.append(f"line {line}: {node.value.id}.{node.attr}")
    return found


def check_file(path: Path) -> list[str]:
    """Problems of one module, each prefixed with its name."""
    source = path.read_text(encoding="utf-8")
    try:
        problems = newer_constructs(source, str(path))
    except SyntaxError as exc:
        return [f"{path}: line {exc.lineno}: not Python 3.9 syntax: {exc.msg}"]
    if path.name != "__init__.py" and "from __future__ import annotations" not in source:
        problems.insert(0, "no 'from __future__ import annotations'")
    return [f"{path}: {problem}" for problem in problems]


def find_python39() -> str | None:
    """A working Python 3.9 on this machine, for tests that drive code with it (skipped where
    there is none): the one ``$GLIDEIN_EXT_PYTHON39`` names, then pyenv's build (its shim may
    not be activated), then PATH."""
    candidates = [found for found in [os.environ.get("GLIDEIN_EXT_PYTHON39")] if found]
    candidates += sorted(glob.glob(str(Path.home() / ".pyenv/versions/3.9*/bin/python3.9")))
    candidates += [found for found in [shutil.which("python3.9")] if found]
    for python in candidates:
        try:
            probe = subprocess.run(
                [python, "-c", "import sys; print(sys.version_info[:2])"],
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
            )
        except OSError:  # a name that is no program
            continue
        if probe.stdout == "(3, 9)\n":
            return python
    return None


def run_python39(
    python: str, *args: str, timeout: float, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """``python ARGS`` (a Python 3.9 that ``find_python39`` found) on this checkout alone: its
    ``PYTHONPATH``, no user site; the exit code, stdout and stderr."""
    return subprocess.run(
        [python, *args],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT), PYTHONNOUSERSITE="1"),
        cwd=cwd,
        timeout=timeout,
        check=False,
    )


# What runs on Python 3.9 is listed once: pyproject.toml's [tool.ruff.per-file-target-version],
# the entries set to "py39" (ruff lints them with 3.9's rules).  Its glidein_ext/ entries are the
# modules a glidein, a pilot or an execute node runs; its tests/unit/ entries are their tests,
# which scripts/py39-chroot runs under a real Python 3.9 (`python -m tests.support.py39 subset`
# prints that list).  tests/unit/test_py39.py checks the modules and that nothing else disagrees.
ROOT = Path(__file__).resolve().parents[2]


def py39_globs(root: Path = ROOT) -> list[str]:
    """The globs pyproject.toml sets to py39 (reading TOML needs Python 3.11's tomllib: this runs
    on the host, never in the 3.9 chroot)."""
    tomllib = importlib.import_module("tomllib")  # Python 3.11+: the host only (see above)
    with open(root / "pyproject.toml", "rb") as handle:
        table = tomllib.load(handle)["tool"]["ruff"]["per-file-target-version"]
    return [pattern for pattern, version in table.items() if version == "py39"]


def _braces(pattern: str) -> list[str]:
    """``a/{b,c}.py`` -> ``a/b.py``, ``a/c.py`` (the one glob feature pathlib lacks)."""
    start = pattern.find("{")
    if start < 0:
        return [pattern]
    end = pattern.index("}", start)
    return [
        expanded
        for choice in pattern[start + 1 : end].split(",")
        for expanded in _braces(pattern[:start] + choice + pattern[end + 1 :])
    ]


def glob_files(pattern: str, root: Path = ROOT) -> list[Path]:
    """The .py files a ruff glob names (``dir/**``: every file below dir)."""
    found: set[Path] = set()
    for one in _braces(pattern):
        if one.endswith("/**"):
            found.update((root / one[:-3]).rglob("*.py"))
        else:
            found.update(path for path in root.glob(one) if path.suffix == ".py")
    return sorted(path for path in found if "__pycache__" not in path.parts)


def py39_files(prefix: str, root: Path = ROOT) -> list[Path]:
    """Every .py file under ``prefix`` (``glidein_ext/``, ``tests/``) the table sets to py39."""
    return sorted(
        {
            path
            for pattern in py39_globs(root)
            if pattern.startswith(prefix)
            for path in glob_files(pattern, root)
        }
    )


def py39_test_subset(root: Path = ROOT) -> list[str]:
    """The test modules scripts/py39-chroot runs, relative to the checkout."""
    return [
        str(path.relative_to(root))
        for path in py39_files("tests/unit/", root)
        if path.name.startswith("test_")
    ]


if __name__ == "__main__":
    import sys

    if sys.argv[1:] != ["subset"]:
        sys.exit("usage: python -m tests.support.py39 subset")
    print("\n".join(py39_test_subset()))
