"""The package's layering, read from its imports (AST), so that it holds by itself.

Rules (docs/design.md, "Layers"):
- only ``glidein_ext.entry`` (and the CLI itself) imports ``glidein_ext.cli``: the CLI is the only
  place that prints and exits, and nothing below it may reach up into it;
- ``dht`` and ``cache`` are libraries: they import neither ``glidein``, ``site``, ``tq`` nor
  ``agent``;
- the Task Queue does not import the glidein side (``glidein``, ``site``);
- the pilot agent (``agent``) knows nothing of glideins: it does not import ``glidein``; a
  glidein's agent, its hooks and everything between them are the hand-off, ``glidein.handoff``,
  the one part of ``glidein`` that imports ``agent``;
- nothing imports ``glidein_ext.entry`` (the console script and HTCondor's fast path);
- ``tq`` is split by who runs it: ``tq.client`` (what pilots import, Python 3.9) imports neither
  ``tq.service`` nor ``tq.manager``; the PilotMonitor/PilotManager (``tq.manager``) does not import
  the service; the pilot agent imports only the client side of the Task Queue;
- the distributed site (``distributed``) and the pure algorithms (``sched``) import neither the
  pilot agent, the glidein side, the site's side, the simulator nor the Task Queue's service: the
  agent passes its parts in; the libraries (``dht``, ``cache``, ``sched``) do not import
  ``distributed``;
- the service's rooms stand on each other from the bottom up: ``matching`` (pure), ``store``,
  ``pool``, ``api``, ``watch``; none imports a room above it;
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
    (("tq.client",), ("tq.service", "tq.manager"), "the client library runs without the service"),
    (("tq.manager",), ("tq.service",), "the PilotManager does not import the service"),
    (("agent", "glidein"), ("tq.service", "tq.manager"), "pilots import only the TQ client"),
    (("agent",), ("glidein",), "the pilot agent does not import the glidein side"),
    (("glidein.rest",), ("agent",), "in a glidein only the hand-off imports the agent"),
    (
        ("distributed", "sched"),
        ("agent", "glidein", "site", "sim", "tq.service", "tq.manager"),
        "the distributed site and its algorithms are given the pilot's parts, never import them",
    ),
    (("dht", "cache", "sched"), ("distributed",), "libraries import no product part"),
    # the Task Queue service's rooms, from the bottom up: matching, the store, the pool's wiring,
    # the API, what operators see (its modules outside them, tq.service.rest, may use any)
    (
        ("tq.service.matching",),
        ("tq.service.store", "tq.service.pool", "tq.service.api", "tq.service.watch"),
        "matching is pure: the store and the API use it",
    ),
    (
        ("tq.service.store",),
        ("tq.service.pool", "tq.service.api", "tq.service.watch"),
        "the store knows no pool wiring, API or watch",
    ),
    (("tq.service.pool",), ("tq.service.api", "tq.service.watch"), "the pool is below the API"),
    (("tq.service.api",), ("tq.service.watch",), "the API does not import what operators see"),
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


# parts whose sub-packages are parts of their own (tq.client, tq.service, ...; glidein.handoff);
# their modules outside a sub-package form the part ``X.rest`` (glidein.rest: glidein.wrapper...)
SPLIT_PARTS = ("tq", "glidein")
# split parts whose sub-packages are parts again (tq.service.api, tq.service.matching, ...)
SPLIT_AGAIN = ("tq.service",)


def part_of(module: str) -> str | None:
    """The part (``glidein_ext.X``, or ``X.Y`` under a split part) a module belongs to, or
    ``tests``."""
    pieces = module.split(".")
    if pieces[0] == "tests":
        return "tests"
    if pieces[0] != PACKAGE or len(pieces) < 2:
        return None
    if pieces[1] in SPLIT_PARTS and len(pieces) > 3:  # glidein_ext.tq.client.x -> tq.client
        part = f"{pieces[1]}.{pieces[2]}"
        if part in SPLIT_AGAIN:  # glidein_ext.tq.service.api.app -> tq.service.api
            if len(pieces) > 4 or _is_package(pieces[:4]):
                return f"{part}.{pieces[3]}"
            return f"{part}.rest"  # glidein_ext.tq.service.server -> tq.service.rest
        return part
    if pieces[1] in SPLIT_PARTS and len(pieces) == 3 and not _is_package(pieces):
        return f"{pieces[1]}.rest"  # glidein_ext.glidein.wrapper -> glidein.rest
    return pieces[1]


def _is_package(pieces: list[str]) -> bool:
    return (ROOT.joinpath(*pieces) / "__init__.py").is_file()


def in_part(part: str | None, parts: tuple[str, ...]) -> bool:
    """``part`` is one of ``parts`` or inside one (``tq.client`` is inside ``tq``)."""
    return part is not None and any(part == p or part.startswith(p + ".") for p in parts)


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
            elif theirs == "entry" and mine != "__main__":
                broken.append("nothing imports entry")
            broken += [
                why
                for parts, banned, why in RULES
                if in_part(mine, parts) and in_part(theirs, banned)
            ]
            for why in broken:
                key = (str(path.relative_to(root)), line, why)
                found.setdefault(key, f"{key[0]}:{line}: {module} imports {target} ({why})")
    return sorted(found.values())


def test_the_package_keeps_its_layers() -> None:
    assert violations(ROOT) == []


# one boundary over each binding: classad2 is imported (or loaded by name) by glidein_ext.classads
# alone (the site tools load classads itself lazily, for their own message when it is missing),
# and HTCondor's Collector and Schedd are built in glidein_ext.condor alone
CLASSAD_BOUNDARY = "glidein_ext.classads"
DAEMON_BOUNDARY = "glidein_ext.condor"
DAEMONS = ("Collector", "Schedd")


def boundary_breaches(root: Path) -> list[str]:
    """Every import of classad2 outside its boundary and every ``htcondor2.Collector(...)`` or
    ``htcondor2.Schedd(...)`` outside ``condor``, one line each."""
    found = []
    for path in sorted((root / PACKAGE).rglob("*.py")):
        module = module_name(path, root)
        where = path.relative_to(root)
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        if module != CLASSAD_BOUNDARY:
            found += [
                f"{where}:{line}: {module} imports classad2"
                for line, target in imports_of(path, module)
                if target.split(".")[0] == "classad2"
            ]
            found += [  # importlib.import_module("classad2") and the like
                f"{where}:{node.lineno}: {module} loads classad2 by name"
                for node in ast.walk(tree)
                if isinstance(node, ast.Call)
                and any(
                    isinstance(a, ast.Constant) and a.value == "classad2" for a in node.args[:1]
                )
            ]
        if module == DAEMON_BOUNDARY:
            continue
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in DAEMONS
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id.startswith("htcondor")
            ):
                found.append(f"{where}:{node.lineno}: {module} builds a {node.func.attr}")
    return found


def test_each_binding_is_reached_through_its_one_boundary() -> None:
    assert boundary_breaches(ROOT) == []


def test_the_boundary_check_catches_a_breach(tmp_path: Path) -> None:
    write(tmp_path, f"{PACKAGE}/classads.py", "import classad2\n")
    write(tmp_path, f"{PACKAGE}/condor.py", "def f(htcondor2):\n    htcondor2.Schedd(1)\n")
    write(tmp_path, f"{PACKAGE}/tq/m.py", "def f():\n    import classad2\n")
    write(tmp_path, f"{PACKAGE}/site/p.py", "def f(htcondor2):\n    htcondor2.Collector()\n")
    write(
        tmp_path, f"{PACKAGE}/site/q.py", "import importlib\nimportlib.import_module('classad2')\n"
    )
    assert boundary_breaches(tmp_path) == [
        "glidein_ext/site/p.py:2: glidein_ext.site.p builds a Collector",
        "glidein_ext/site/q.py:2: glidein_ext.site.q loads classad2 by name",
        "glidein_ext/tq/m.py:2: glidein_ext.tq.m imports classad2",
    ]


def write(root: Path, relative: str, text: str) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_each_rule_catches_a_violation(tmp_path: Path) -> None:
    """The checker fails on a tree that breaks each rule (so the test above can fail)."""
    parts = ("cli", "dht", "cache", "tq", "site", "glidein", "agent", "tq/client", "distributed")
    for part in (*parts, "sched"):
        write(tmp_path, f"{PACKAGE}/{part}/__init__.py", "")
    modules = {
        "entry.py": "from glidein_ext.cli import main\n",
        "site/status.py": "def f():\n    from glidein_ext import cli\n",
        "dht/node.py": "from ..tq import store\n",
        "cache/peer.py": "import glidein_ext.agent.runner\n",
        "tq/api.py": "from glidein_ext.glidein.sitead import X\n",
        "tq/helper.py": "from tests.support import thing\n",
        "cli/tq.py": "from glidein_ext.tq.service import api\n",  # allowed
        "tq/client/x.py": "from glidein_ext.tq.service import store\n",
        "agent/y.py": "from glidein_ext.tq.manager.monitor import m\n",
        # the hand-off: the agent never imports the glidein side (lazily neither); in the glidein
        # only glidein.handoff imports the agent; nothing imports entry
        "agent/z.py": "def f():\n    from glidein_ext.glidein import hooks\n",
        "glidein/tqwork.py": "def f():\n    import glidein_ext.agent.agent\n",
        "glidein/handoff/__init__.py": "",
        "glidein/handoff/agent.py": "from glidein_ext.agent import agent\n",
        "cli/hook.py": "from glidein_ext.entry import run_hook_command\n",
        # the distributed site is given the agent's parts; the algorithms do not reach up into it
        "distributed/x.py": "from glidein_ext.agent.executor import E\n",
        "sched/y.py": "from glidein_ext.distributed import codec\n",
        "tq/service/__init__.py": "",
        "tq/service/matching/__init__.py": "",
        "tq/service/matching/m.py": "from glidein_ext.tq.service import store\n",
        "tq/service/server.py": "from glidein_ext.tq.service.api import app\n",
    }
    for module, text in modules.items():
        write(tmp_path, f"{PACKAGE}/{module}", text)
    found = violations(tmp_path)
    assert [line.rsplit("(", 1)[1] for line in found] == [
        "pilots import only the TQ client)",
        "the pilot agent does not import the glidein side)",
        "a library imports no product part)",
        "nothing imports entry)",
        "a library imports no product part)",
        "the distributed site and its algorithms are given the pilot's parts, never import them)",
        "in a glidein only the hand-off imports the agent)",
        "libraries import no product part)",
        "only entry imports cli)",
        "the Task Queue does not import the glidein side)",
        "the client library runs without the service)",
        "nothing imports tests)",
        "matching is pure: the store and the API use it)",
    ]
    assert found[4].startswith(
        "glidein_ext/dht/node.py:1: glidein_ext.dht.node imports glidein_ext.tq"
    )
