"""pytest-xdist's ``--dist loadgroup`` by marks, on pytest 8 and 9 alike.

xdist's loadgroup sends every test carrying ``@pytest.mark.xdist_group(name)`` to one worker.  Its
only channel from the workers (which collect) to the controller (which schedules) was the node id:
each worker rewrote ``item._nodeid`` to ``<nodeid>@<name>`` and the controller split the name off
again.  pytest 9.2 builds ``item.nodeid`` from a structured id, so that write no longer changes
anything: the groups silently vanish and the tests spread over all the workers (still so in
pytest-xdist 3.8, its newest release).

Here the groups travel on their own channel instead, and the node id is left alone:

* the controller gives every worker a private directory (``pytest_configure_node``, through the
  ``workerinput`` xdist sends to each worker);
* each worker, once it has collected, writes ``{nodeid: group}`` for its grouped tests to
  ``<dir>/<worker id>.json`` before xdist reports the collection (``pytest_collection_finish``,
  tryfirst);
* the controller's scheduler, a ``LoadGroupScheduling`` (``pytest_xdist_make_scheduler``), reads
  that file when the worker's collection arrives and takes the group from it; a node id with
  xdist's ``@name`` suffix (pytest 8) still works the old way.

The xdist_group marks themselves are added at collection by tests/conftest.py, from the
``condor`` and ``heavy`` marks.  Imported into tests/conftest.py; xdist is imported only inside
the hooks, which run only when xdist is there.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from xdist.scheduler import LoadGroupScheduling
    from xdist.workermanage import WorkerController

WORKERINPUT_KEY = "glidein_ext_xdist_groups"
_DIR = pytest.StashKey[str]()


def group_of(item: pytest.Item) -> str | None:
    """The item's xdist group name, as xdist itself names it (its groups, sorted, joined by _)."""
    names = set()
    for mark in item.iter_markers("xdist_group"):
        names.add(str(mark.args[0] if mark.args else mark.kwargs.get("name", "default")))
    return "_".join(sorted(names)) if names else None


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: WorkerController) -> None:
    """Controller: tell each worker where to write its groups."""
    config = node.config
    if _DIR not in config.stash:
        config.stash[_DIR] = tempfile.mkdtemp(prefix="glidein-ext-xdist-groups-")
    node.workerinput[WORKERINPUT_KEY] = config.stash[_DIR]


@pytest.hookimpl(tryfirst=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    """Worker: write {nodeid: group} before xdist sends the collection to the controller."""
    workerinput: dict[str, Any] = getattr(session.config, "workerinput", {})
    directory = workerinput.get(WORKERINPUT_KEY)
    if not directory:
        return
    groups = {item.nodeid: group for item in session.items if (group := group_of(item))}
    path = Path(directory) / f"{workerinput['workerid']}.json"
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(groups))
    os.replace(partial, path)


def pytest_unconfigure(config: pytest.Config) -> None:
    directory = config.stash.get(_DIR, None)
    if directory is not None:
        shutil.rmtree(directory, ignore_errors=True)


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> LoadGroupScheduling | None:
    """Controller: for --dist loadgroup, a scheduler that takes the groups from the workers."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling  # untyped (Any), hence the ignore

    class MarkGroupScheduling(LoadGroupScheduling):  # type: ignore[misc]
        def __init__(self, config: pytest.Config, log: Any = None) -> None:
            super().__init__(config, log)
            self.groups: dict[str, str] = {}

        def add_node_collection(self, node: WorkerController, collection: Any) -> None:
            directory = node.workerinput.get(WORKERINPUT_KEY)
            path = Path(directory) / f"{node.workerinput['workerid']}.json"
            try:
                groups = json.loads(path.read_text())
            except (OSError, ValueError) as exc:
                # Without its groups the worker's tests would spread silently: refuse instead.
                raise RuntimeError(f"xdist groups of {node.gateway.id} unreadable: {exc}") from exc
            self.groups.update(groups)
            super().add_node_collection(node, collection)

        def _split_scope(self, nodeid: str) -> str:
            group = self.groups.get(nodeid)
            if group is not None:
                return group
            return str(super()._split_scope(nodeid))

    return MarkGroupScheduling(config, log)
