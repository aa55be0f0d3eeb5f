"""sitead: .site.ad + MJF + the glidein's own retire time -> one drain order."""

from __future__ import annotations

from glidein_ext.glidein.sitead import NO_ORDER, DrainOrder, drain_order, usable_time

NOW = 10_000


def test_no_file_no_order() -> None:
    assert drain_order(None, NOW) == NO_ORDER
    assert drain_order({}, NOW) == NO_ORDER


def test_vacate_desired_without_deadline() -> None:
    assert drain_order({"VACATE_DESIRED": True}, NOW) == DrainOrder(True, None, "site.ad")


def test_vacate_with_deadline() -> None:
    order = drain_order({"VACATE_DESIRED": True, "PAYLOAD_DEADLINE": NOW + 60}, NOW)
    assert order == DrainOrder(True, NOW + 60, "site.ad")


def test_deadline_alone_is_an_order() -> None:
    assert drain_order({"PAYLOAD_DEADLINE": NOW + 5}, NOW) == DrainOrder(True, NOW + 5, "site.ad")


def test_vacate_false_cancels_even_with_a_deadline() -> None:
    assert drain_order({"VACATE_DESIRED": False, "PAYLOAD_DEADLINE": NOW + 5}, NOW) == NO_ORDER


def test_mjf_shutdown_times_and_the_earliest_deadline_wins() -> None:
    order = drain_order(
        {"VACATE_DESIRED": True, "PAYLOAD_DEADLINE": NOW + 500},
        NOW,
        machine_shutdown=NOW + 900,
        job_shutdown=NOW + 300,
    )
    assert order == DrainOrder(True, NOW + 300, "jobfeatures")
    order = drain_order(None, NOW, machine_shutdown=NOW + 900)
    assert order == DrainOrder(True, NOW + 900, "machinefeatures")


def test_mjf_is_obeyed_even_if_the_site_ad_cancels() -> None:
    order = drain_order({"VACATE_DESIRED": False}, NOW, machine_shutdown=NOW + 100)
    assert order == DrainOrder(True, NOW + 100, "machinefeatures")


def test_glidein_retire_time() -> None:
    assert drain_order(None, NOW, glidein_retire_time=NOW + 1) == NO_ORDER
    assert drain_order(None, NOW, glidein_retire_time=NOW) == DrainOrder(True, None, "glidein")
    both = drain_order({"VACATE_DESIRED": True}, NOW, glidein_retire_time=NOW - 5)
    assert both.source == "site.ad"


def test_usable_time() -> None:
    assert usable_time(DrainOrder(True, NOW + 50, "site.ad"), NOW, NOW + 900) == 0
    assert usable_time(NO_ORDER, NOW, NOW + 900) == 900
    assert usable_time(NO_ORDER, NOW, None) is None
    assert usable_time(NO_ORDER, NOW, NOW - 9) == 0
