"""CACHED_INPUT_NEEDED_MB produced by a real glidein agent (its pilot lanes, in this process)
against a real ``tq serve``: once a queued task reads a file the glidein's lanes cache, the agent
writes the glidein's value to ``cache-need.ad`` and the `.pilot.ad` refresh copies it.

Pre-DHT, the lanes learn it from the Task Queue's heartbeat answer; distributed, from the
master's TaskList.  No HTCondor here: the lanes' startd never asks for work, so no lane takes the
task and it stays to run.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from glidein_ext.agent.agent import AgentConfig
from glidein_ext.agent.settings import AgentSettings
from glidein_ext.cache.store import CacheStore
from glidein_ext.glidein.cacheneed import read_cache_need
from glidein_ext.glidein.handoff.agent import GlideinAgent, GlideinAgentConfig
from glidein_ext.glidein.handoff.executor import GlideinIdentity
from glidein_ext.glidein.info import GlideinInfo, save_info
from glidein_ext.glidein.pilotad import CACHED_INPUT_NEEDED_MB
from glidein_ext.glidein.refresh import refresh
from glidein_ext.testbed.tq_server import TqServer

LFN = "/store/in.dat"
SIZE = 1_500_000  # bytes: 2 MB rounded up


def _glidein_agent(server: TqServer, tmp_path: Path, lanes: int) -> GlideinAgent:
    start = tmp_path / "glidein"
    start.mkdir()
    now = int(time.time())
    save_info(str(start), GlideinInfo(cpus=lanes, start_time=now - 10, todie=now + 3600))
    workdir = start / ".glidein-ext" / "tq"
    data = os.urandom(SIZE)
    for lane in range(lanes):  # every lane holds the file (hard links on a real host)
        CacheStore(workdir / f"lane-{lane}" / "cache", 10 * SIZE).insert_bytes(LFN, data)
    agent = AgentConfig(
        url=server.url,
        token=server.pilot_token,
        site="T0",
        workdir=workdir,
        host="wn-need",
        se_dir=tmp_path / "se",
        settings=AgentSettings(poll_interval=0.3, round_period=0.5),
    )
    config = GlideinAgentConfig(
        agent=agent,
        start_dir=str(start),
        lanes=lanes,
        identity=GlideinIdentity("glidein-need", "nobody", os.defpath),
        retire_check=0.2,
        need_every=0.5,
    )
    return GlideinAgent(config, retiring=lambda: False)


@pytest.fixture
def glidein_agent(tmp_path: Path) -> Iterator[Callable[[TqServer, int], GlideinAgent]]:
    started: list[GlideinAgent] = []

    def start(server: TqServer, lanes: int) -> GlideinAgent:
        (tmp_path / "se").mkdir(exist_ok=True)
        agent = _glidein_agent(server, tmp_path, lanes).start()
        started.append(agent)
        return agent

    yield start
    for agent in started:
        agent.stop()
        agent.wait(30)
        agent.close()


@pytest.mark.parametrize("architecture", ["pre-dht", "distributed"])
def test_a_glideins_cache_need_reaches_pilot_ad_once_a_queued_task_reads_its_file(
    architecture: str,
    tq_server: Callable[..., TqServer],
    glidein_agent: Callable[[TqServer, int], GlideinAgent],
    wait_until: Callable[..., Any],
) -> None:
    server = tq_server(args=["--architecture", architecture], heartbeat_interval="1")
    agent = glidein_agent(server, 2)
    start = agent.config.start_dir

    def value() -> int | None:
        return read_cache_need(start, int(time.time()))[0]

    if architecture == "pre-dht":  # the Task Queue answers: nothing queued reads it
        wait_until(lambda: value() == 0, 30, "the agent to write 0 (nothing queued)")
    workflow: dict[str, Any] = {"name": "needs", "available": [LFN]}
    task: dict[str, Any] = {"name": "reader", "command": "true", "inputs": [LFN]}
    if architecture == "pre-dht":  # queued, whoever asks; distributed, the TaskList carries
        task["requirements"] = 'TARGET.Host == "elsewhere"'  # only tasks the site may run
    workflow["tasks"] = [task]
    server.operator().submit(workflow)
    wait_until(lambda: value() == 2, 60, "the agent to write 2 MB (both lanes, the file once)")
    result = refresh(start, int(time.time()), {})
    assert result.pilot_ad is not None and result.pilot_ad[CACHED_INPUT_NEEDED_MB] == 2
    assert agent.lanes_alive() == 2
