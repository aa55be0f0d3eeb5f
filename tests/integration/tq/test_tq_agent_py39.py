"""The pilot agent runs on the worker nodes' Python 3.9 with the standard library only.

A static check of the agent and the Task Queue modules it uses (always), and a real pilot agent
under a real Python 3.9 (skipped when none is installed) against a real `tq serve`: it registers,
refuses a task whose LFN breaks the rule as that task's failure, runs a good one, and leaves.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from glidein_ext.testbed.tq_server import PILOT, TqServer
from glidein_ext.tq.models import MatchSpec
from glidein_ext.tq.service.server import open_store
from glidein_ext.tq.service.settings import TqSettings
from glidein_ext.tq.workflow import TaskDef, WorkflowDef
from tests.support.py39 import check_file, find_python39, run_python39

ROOT = Path(__file__).resolve().parents[3]
AGENT_FILES = [
    *sorted((ROOT / "glidein_ext" / "agent").glob("*.py")),
    *sorted((ROOT / "glidein_ext" / "tq" / "client").glob("*.py")),
    *(ROOT / "glidein_ext" / f"{name}.py" for name in ("backoff", "throttle")),
]


def test_the_agent_and_what_it_imports_are_python_3_9() -> None:
    assert len(AGENT_FILES) >= 9
    assert [problem for path in AGENT_FILES for problem in check_file(path)] == []


AGENT = r"""
import logging, sys, threading
from pathlib import Path
assert sys.version_info[:2] == (3, 9), sys.version
logging.basicConfig(level=logging.ERROR)
from glidein_ext.agent.agent import AgentConfig, PilotAgent
from glidein_ext.agent.settings import AgentSettings
heavy = sorted(
    m for m in sys.modules
    if m.split(".")[0] in {"fastapi", "sqlalchemy", "pydantic", "classad2", "yaml", "click"}
)
assert not heavy, heavy
url, token, workdir, se_dir = sys.argv[1:5]
config = AgentConfig(
    url=url, token=token, site="T0", workdir=Path(workdir), se_dir=Path(se_dir),
    max_idle=3, settings=AgentSettings(
        poll_interval=0.2, retry_for=10, cache_max_space=str(10**8), cache_min_threshold="0",
    ),
)
ran = PilotAgent(config).run()
assert threading.active_count() == 1
print("py39 agent ran", ran)
"""


def test_a_pilot_agent_runs_on_python_3_9(
    tmp_path: Path, tq_server: Callable[..., TqServer]
) -> None:
    python = find_python39()
    if python is None:
        pytest.skip("no Python 3.9 interpreter on this machine")
    directory = tmp_path / "tq"
    directory.mkdir()
    store = open_store(TqSettings(database=str(directory / "tq.sqlite")))
    bad = TaskDef("bad", "true", MatchSpec(), outputs=("/store/a\x00b",), max_retries=0)
    store.submit(WorkflowDef("poison", (bad,)))  # as an older TQ would have let it through
    store.engine.dispose()
    server = tq_server("tq")
    good = {"name": "good", "command": "sh -c 'echo ok > $TQ_OUTPUTS'", "outputs": ["/store/ok"]}
    server.operator().submit({"name": "fine", "tasks": [good]})
    (tmp_path / "se").mkdir()
    done = run_python39(
        python,
        *("-W", "error", "-c", AGENT),
        *(server.url, PILOT, str(tmp_path / "w"), str(tmp_path / "se")),
        timeout=120,
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "py39 agent ran 2\n", "")
    states = {wf.name: wf.tasks for wf in server.operator().status().workflows}
    assert states["poison"]["failed"] == 1 and states["fine"]["done"] == 1
    assert (tmp_path / "se" / "store" / "ok").read_text() == "ok\n"
