"""The package's layering, read from its imports (AST), so that it holds by itself.

Rules (docs/design.md, "Layers"):
- only ``glidein_ext.entry`` (and the CLI itself) imports ``glidein_ext.cli``: the CLI is the only
  place that prints and exits, and nothing below it may reach up into it;
- ``dht`` and ``cache`` are libraries: they import neither ``glidein``, ``site``, ``tq`` nor
  ``agent``;
- the Task Queue service does not import the glidein side (``glidein``, ``site``);
- nothing in the package imports ``tests``.
Imports inside functions count: lazy imports are still dependencies.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PACKAGE = "glidein_ext"
ROOT = Path(__file__).resolve().parents[2]

# (importing packages, forbidden packages, why)
RULES: tuple[tuple[tuple[str, ...], tuple[str, ...], str], ...] = (
    (("dht", "cache"), ("glidein", "site", "tq", "agent"), "a library imports no product part"),
    (("tq",), ("glidein", "site"), "the Task Queue does not import the glidein side"),
)


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path, module: str) -> Iterator[tuple[int, str]]:
    """(line, imported module) for every import in the file, relative ones resolved."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            yield node.lineno, base
            for alias in node.names:  # "from glidein_ext import cli" imports a package too
                yield node.lineno, f"{base}.{alias.name}"


def part_of(module: str) -> str | None:
    """The first-level part (``glidein_ext.X``) a module belongs to, or ``tests``."""
    pieces = module.split(".")
    if pieces[0] == "tests":
        return "tests"
    if pieces[0] != PACKAGE or len(pieces) < 2:
        return None
    return pieces[1]


def violations(root: Path) -> list[str]:
    """Every broken rule in the package under ``root``, one line each."""
    found: dict[tuple[str, int, str], str] = {}
    for path in sorted((root / PACKAGE).rglob("*.py")):
        module = module_name(path, root)
        mine = part_of(module)
        for line, target in imports_of(path, module):
            theirs = part_of(target)
            broken = []
            if theirs == "tests":
                broken.append("nothing imports tests")
            elif theirs == "cli" and mine not in ("cli", "entry"):
                broken.append("only entry imports cli")
            broken += [why for parts, banned, why in RULES if mine in parts and theirs in banned]
            for why in broken:
                key = (str(path.relative_to(root)), line, why)
                found.setdefault(key, f"{key[0]}:{line}: {module} imports {target} ({why})")
    return sorted(found.values())


def test_the_package_keeps_its_layers() -> None:
    assert violations(ROOT) == []


def write(root: Path, relative: str, text: str) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_each_rule_catches_a_violation(tmp_path: Path) -> None:
    """The checker fails on a tree that breaks each rule (so the test above can fail)."""
    for part in ("cli", "dht", "cache", "tq", "site", "glidein", "agent"):
        write(tmp_path, f"{PACKAGE}/{part}/__init__.py", "")
    write(tmp_path, f"{PACKAGE}/entry.py", "from glidein_ext.cli import main\n")
    write(tmp_path, f"{PACKAGE}/site/status.py", "def f():\n    from glidein_ext import cli\n")
    write(tmp_path, f"{PACKAGE}/dht/node.py", "from ..tq import store\n")
    write(tmp_path, f"{PACKAGE}/cache/peer.py", "import glidein_ext.agent.runner\n")
    write(tmp_path, f"{PACKAGE}/tq/api.py", "from glidein_ext.glidein.sitead import X\n")
    write(tmp_path, f"{PACKAGE}/tq/helper.py", "from tests.support import thing\n")
    write(tmp_path, f"{PACKAGE}/cli/tq.py", "from glidein_ext.tq import api\n")  # allowed
    found = violations(tmp_path)
    assert [line.rsplit("(", 1)[1] for line in found] == [
        "a library imports no product part)",
        "a library imports no product part)",
        "only entry imports cli)",
        "the Task Queue does not import the glidein side)",
        "nothing imports tests)",
    ]
    assert found[1].startswith(
        "glidein_ext/dht/node.py:1: glidein_ext.dht.node imports glidein_ext.tq"
    )
