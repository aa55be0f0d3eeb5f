"""The DHT runs inside pilots, on the worker nodes' Python 3.9 with the standard library only.

Two checks: the source follows the 3.9 rules of the project (read from the AST, always), and a
small network really runs under a Python 3.9 interpreter when one is installed (``python3.9`` on
the PATH, under pyenv, or named by ``GLIDEIN_EXT_PYTHON39``).
"""

from __future__ import annotations

import ast
import builtins
import importlib.util
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.support.py39 import find_python39

ROOT = Path(__file__).resolve().parents[3]
DHT = ROOT / "glidein_ext" / "dht"
ALLOWED_OWN = {"glidein_ext.dht", "glidein_ext.errors"}
MATCH = getattr(ast, "Match", ())  # Python 3.10+; on 3.9 a match statement does not even parse


def is_stdlib(top: str) -> bool:
    names = getattr(sys, "stdlib_module_names", None)  # Python 3.10+
    if names is not None:
        return top in names
    spec = importlib.util.find_spec(top)  # Python 3.9 (the py39 chroot runs these tests too)
    if spec is None or spec.origin is None:
        return False
    stdlib = sysconfig.get_paths()["stdlib"]
    return spec.origin in {"built-in", "frozen"} or (
        spec.origin.startswith(stdlib) and "site-packages" not in spec.origin
    )


def sources() -> list[Path]:
    return sorted(DHT.glob("*.py"))


def annotation_nodes(tree: ast.AST) -> set[int]:
    """ids of every node inside an annotation (not evaluated with postponed annotations)."""
    inside: set[int] = set()
    for node in ast.walk(tree):
        roots: list[ast.AST | None] = []
        if isinstance(node, ast.arg):
            roots.append(node.annotation)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            roots.append(node.returns)
        elif isinstance(node, ast.AnnAssign):
            roots.append(node.annotation)
        for root in roots:
            if root is not None:
                inside.update(id(n) for n in ast.walk(root))
    return inside


def is_type_expression(node: ast.expr) -> bool:
    """None, a builtin class, or a generic such as ``list[int]`` or ``Callable[...]``."""
    if isinstance(node, ast.Constant):
        return node.value is None
    if isinstance(node, ast.Subscript):
        node = node.value
    if isinstance(node, ast.Attribute):  # typing.Callable, collections.abc.Awaitable
        return is_class_name(node.attr)
    if isinstance(node, ast.Name):
        return isinstance(getattr(builtins, node.id, None), type) or is_class_name(node.id)
    return False


def is_class_name(name: str) -> bool:
    """CamelCase (a class, a generic alias), not UPPER_CASE (a constant)."""
    return name[:1].isupper() and not name.isupper()


def violations(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    found = []
    first = next((s for s in tree.body if not isinstance(s, ast.Expr)), None)
    if not (
        isinstance(first, ast.ImportFrom)
        and first.module == "__future__"
        and any(a.name == "annotations" for a in first.names)
    ):
        found.append("no `from __future__ import annotations` at the top")
    in_annotation = annotation_nodes(tree)
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, MATCH):
            found.append(f"{line}: match statement")
        elif isinstance(node, ast.Call):
            name = ast.unparse(node.func)
            keywords = {k.arg for k in node.keywords}
            if name.endswith("dataclass") and keywords & {"slots", "kw_only"}:
                found.append(f"{line}: dataclass(slots=/kw_only=)")
            if name == "zip" and "strict" in keywords:
                found.append(f"{line}: zip(strict=)")
            if name in {"asyncio.timeout", "asyncio.TaskGroup"}:
                found.append(f"{line}: {name}")
        elif (
            isinstance(node, ast.BinOp)
            and isinstance(node.op, ast.BitOr)
            and id(node) not in in_annotation
            and any(is_type_expression(side) for side in (node.left, node.right))
        ):
            found.append(f"{line}: `X | Y` of types evaluated at run time")
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            modules = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
            )
            for module in modules:
                top = module.split(".")[0]
                own = any(module == m or module.startswith(m + ".") for m in ALLOWED_OWN)
                if top != "__future__" and not is_stdlib(top) and not own:
                    found.append(f"{line}: imports {module} (standard library only)")
            if isinstance(node, ast.ImportFrom) and node.module == "typing":
                late = {a.name for a in node.names} & {"Self", "TypeAlias", "TypeGuard"}
                found.extend(f"{line}: typing.{name}" for name in sorted(late))
    return found


def test_the_dht_follows_the_python_39_rules() -> None:
    problems = {p.name: v for p in sources() if (v := violations(p))}
    assert problems == {}


def test_the_rules_check_catches_a_violation(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text(
        "import msgpack\n"
        "from dataclasses import dataclass\n"
        "Handler = dict[str, int] | None\n"
        "FLAGS = READ_ONLY | 2\n"
        "ok = isinstance(1, int | str)\n"
        "@dataclass(slots=True)\n"
        "class A:\n"
        "    x: int | None\n"
    )
    found = violations(bad)
    assert found[0].startswith("no `from __future__")
    assert any("msgpack" in f for f in found)
    assert any("dataclass(slots" in f for f in found)
    assert sum("`X | Y`" in f for f in found) == 2  # not the flags, nor the annotation


SMOKE = """
import asyncio, sys
sys.path.insert(0, {root!r})
from glidein_ext.dht.node import DhtNode
from glidein_ext.dht.settings import DhtSettings

async def main():
    settings = DhtSettings(rpc_timeout=0.5, replication=3)
    key = b"python-3.9-smoke-test-site-key"
    nodes = []
    try:
        for i in range(6):
            node = DhtNode(key, node_id=(i + 1) << 150, settings=settings)
            nodes.append(node)
            await node.start("127.0.0.1", 0)
            if i:
                await node.join([nodes[0].address])
        values = [b"wn%03d:/cache/" % i + b"x" * 300 for i in range(250)]
        assert await nodes[1].put_many("big", values) == 3
        assert sorted(await nodes[4].get("big")) == values
        for node in nodes:
            node.register_broadcast("count", lambda payload: 1, sum)
        result = await nodes[2].broadcast("count", {{"tasks": [1, 2.5, None, b"x"]}}, timeout=5)
        assert result.value == 6 and result.complete, result
        await nodes[5].leave()
    finally:
        for node in nodes:
            await node.close()
    print("ok", sys.version_info[:2])

asyncio.run(main())
"""


def test_a_network_runs_on_python_39() -> None:
    interpreter = find_python39()
    if interpreter is None:
        pytest.skip("no Python 3.9 interpreter here (set GLIDEIN_EXT_PYTHON39)")
    result = subprocess.run(
        [interpreter, "-s", "-c", SMOKE.format(root=str(ROOT))],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "ok (3, 9)"
