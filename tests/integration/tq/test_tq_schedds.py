"""Several schedds per site (tq.manager.schedds) against the sandbox's real site pool: a second
schedd runs beside the pool's own; pilots are spread over them by load, and a schedd that does not
exist or stops is backed off while the other takes the pilots.

The pilot jobs' Requirements are false: they stay idle (their load counts), nothing runs.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterator

import pytest

from glidein_ext.sandbox.pool import CondorSandbox, ExtraSchedd
from glidein_ext.tq.manager.pilot_submit import PilotJob
from glidein_ext.tq.manager.schedds import ScheddLimit, submitter_for

pytestmark = pytest.mark.condor
POOL = "127.0.0.1:9618"
SITE = "T2_TWO_SCHEDDS"


@pytest.fixture
def second_schedd(sandbox: CondorSandbox) -> Iterator[ExtraSchedd]:
    schedd = sandbox.start_schedd(f"second{os.getpid()}")
    yield schedd
    schedd.stop()


def _queued(sandbox: CondorSandbox, schedd: str) -> int:
    out = sandbox.run(
        "condor_q", "-name", schedd, "-allusers", "-json",
        "-constraint", f'GlideinExtTqSite == "{SITE}"',
    )  # fmt: skip
    return len(json.loads(out)) if out.strip() else 0


@pytest.mark.usefixtures("claim_to_be_glidein")
def test_pilots_spread_over_two_schedds_and_a_failing_one_is_backed_off(
    sandbox: CondorSandbox, second_schedd: ExtraSchedd
) -> None:
    names = sandbox.run("condor_status", "-schedd", "-af", "Name").split()
    first = next(n for n in names if n != second_schedd.name)
    limits = [
        ScheddLimit(first, 6),
        ScheddLimit(second_schedd.name, 6),
        ScheddLimit("no-such-schedd@nowhere", 6),
    ]
    submitter = submitter_for(POOL, limits, None)
    job = PilotJob(tq_url="http://127.0.0.1:1", workdir_base="/tmp", requirements="false")
    try:
        ids = submitter.submit(SITE, 6, job)
        by_schedd = Counter(batch_id.rpartition("/")[0] for batch_id in ids)
        print(f"6 pilots over two schedds: {dict(by_schedd)}")
        assert by_schedd == {first: 3, second_schedd.name: 3}  # equal limits, equal loads
        assert _queued(sandbox, first) == 3 and _queued(sandbox, second_schedd.name) == 3
        now = submitter.clock()
        assert not submitter.balancer.backoff.ready("no-such-schedd@nowhere", now)
        assert submitter.alive(ids) == set(ids)

        second_schedd.stop()  # a schedd that stops: the other takes its share
        more = submitter.submit(SITE, 2, job)
        assert {batch_id.rpartition("/")[0] for batch_id in more} == {first}
        assert not submitter.balancer.backoff.ready(second_schedd.name, submitter.clock())
        assert _queued(sandbox, first) == 5
        # the stopped schedd's pilots are not taken for gone while it cannot be asked
        assert set(ids) <= submitter.alive(ids)
    finally:
        sandbox.remove(f'GlideinExtTqSite == "{SITE}"')
