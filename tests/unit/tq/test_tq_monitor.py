"""The PilotMonitor algorithm of seed 001 IV-A."""

from __future__ import annotations

import pytest

from glidein_ext.tq.monitor import SiteView, Thresholds, pilots_to_submit


def test_no_slots_left_submits_nothing() -> None:
    limits = Thresholds(min_pilots=2, max_pilots=5, min_idle_pilots=3)
    assert pilots_to_submit(limits, SiteView(idle=1, busy=4, queued_groups=[100])) == 0


def test_inactive_pilots_cover_tasks_first() -> None:
    limits = Thresholds(max_pilots=20)
    assert pilots_to_submit(limits, SiteView(inactive=5, queued_groups=[3, 2])) == 0
    assert pilots_to_submit(limits, SiteView(inactive=5, queued_groups=[3, 4])) == 2


def test_tasks_get_pilots_up_to_max() -> None:
    limits = Thresholds(max_pilots=10)
    assert pilots_to_submit(limits, SiteView(busy=4, queued_groups=[3])) == 3
    assert pilots_to_submit(limits, SiteView(busy=4, queued_groups=[30, 5])) == 6


def test_min_idle_and_min_pilots() -> None:
    assert pilots_to_submit(Thresholds(max_pilots=10, min_idle_pilots=2), SiteView(busy=3)) == 2
    assert pilots_to_submit(Thresholds(max_pilots=10, min_idle_pilots=2), SiteView(idle=2)) == 0
    assert pilots_to_submit(Thresholds(min_pilots=4, max_pilots=10), SiteView(busy=1)) == 3
    assert pilots_to_submit(Thresholds(min_pilots=4, max_pilots=4), SiteView()) == 4


def test_bad_thresholds() -> None:
    with pytest.raises(ValueError, match="minPilots"):
        Thresholds(min_pilots=5, max_pilots=2)
