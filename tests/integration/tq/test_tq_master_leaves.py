"""A distributed site's master leaves gracefully (SIGTERM: a drained or finished pilot) with the
Task Queue's default master timeout of a minute (Delgado Peris 2014 §III.B): its last ``sync``
carries what it holds, it tells its successors the role is free, and the lowest-id live pilot
holds the role within seconds, not after the minute a silent master is given.  The workflow
submitted after the leave completes under the new master."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from tests.support.tq_master_runs import master_first, masters, wait_for_a_second_master

pytestmark = pytest.mark.heavy  # real processes: with the other heavy tests (tests/conftest.py)


def test_a_leaving_master_hands_the_role_on_at_once(tmp_path: Path) -> None:
    with master_first(tmp_path, 9) as site:
        operator = site.operator
        first = site.run_workflow("w1", 0.1, sleep=0.2)
        assert first["tasks_done"] >= first["tasks"]
        (master,) = masters(operator)
        assert (master["pilot_id"], master["epoch"]) == (1, 1)
        left_at = time.monotonic()
        site.procs[0].send_signal(signal.SIGTERM)  # the master leaves, as a drained pilot does
        assert site.procs[0].wait(timeout=60) == 0
        # A minute is the master timeout: a resigned role is taken long before.
        granted = wait_for_a_second_master(site, since=left_at, within=20)
        assert (granted[-1]["pilot_id"], granted[-1]["epoch"]) == (2, 2), granted
        assert "the master of epoch 1 leaves" in site.logs(tail=200_000)
        second = site.run_workflow("w2", 0.1, sleep=0.2)  # under the new master (new files)
        assert second["tasks_done"] >= second["tasks"]
        assert second["requests"].keys() <= {"sync", "assign", "claim"}
