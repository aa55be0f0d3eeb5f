"""The distributed site's cores under schedules a seed explores (Delgado Peris 2014 §III.B-C): the
workers' and the masters' state machines and a Task Queue held to the store's rules
(tests/support/site_model.py), messages delivered in any order, lost before or after their
addressee acted, duplicated and delayed; kills, revocations, takeovers and a stale master's
``end``.  After every step: no task done twice, no pilot obeys a master of an older epoch, no
task running without a live runner longer than the timeouts allow; after the faults stop, every
task is done.  A failing seed reproduces its schedule exactly (``explore(seed)``)."""

from __future__ import annotations

import pytest

from tests.support.site_model import explore

SCHEDULES = 2000  # in CI: about a minute at most on a loaded 2-core machine
CHUNKS = 20


@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_every_schedule_keeps_the_site_s_promises(chunk: int) -> None:
    per = SCHEDULES // CHUNKS
    for seed in range(chunk * per, (chunk + 1) * per):
        try:
            explore(seed)
        except AssertionError as exc:
            raise AssertionError(f"seed {seed}: {exc}") from exc


def test_the_explorer_sees_what_it_checks() -> None:
    """The schedules reach what the checks are about: takeovers, stale ends refused, kills,
    revocations, answers lost after the addressee acted (else the checks prove nothing)."""
    traces = "\n".join(line for seed in range(200) for line in explore(seed).trace)
    for seen in (
        "is the master of epoch 2",
        "stale end of epoch 1",
        "kill ",
        "revoke ",
        "(answer lost)",
        "lose ",
        "steps down",
    ):
        assert seen in traces, seen
