"""A large submission's CPU-bound job (``tq.service.cpu_bound``): the collector and the switch
interval paused and shortened while any job runs, and back as they were after the last."""

from __future__ import annotations

import gc
import sys
import threading

import pytest

from glidein_ext.tq.service.cpu_bound import SWITCH_INTERVAL, cpu_bound_job


def test_the_collector_and_the_switch_interval_are_paused_then_restored() -> None:
    interval = sys.getswitchinterval()
    assert gc.isenabled()
    entered = threading.Event()
    leave = threading.Event()

    def other() -> None:
        with cpu_bound_job():
            entered.set()
            leave.wait(10)

    thread = threading.Thread(target=other)
    try:
        with cpu_bound_job():
            thread.start()
            assert entered.wait(10)
            assert not gc.isenabled()
            assert sys.getswitchinterval() == pytest.approx(SWITCH_INTERVAL)
        assert not gc.isenabled()  # the other job still runs
        leave.set()
        thread.join(10)
        assert gc.isenabled()
        assert sys.getswitchinterval() == pytest.approx(interval)
    finally:
        leave.set()
        gc.unfreeze()
        gc.enable()
        sys.setswitchinterval(interval)
