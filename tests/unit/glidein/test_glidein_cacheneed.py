"""CACHED_INPUT_NEEDED_MB from the pilot agent's hand-off file into `.pilot.ad` (the refresh), and
from there, prefixed PILOT_, into the site cron's slot ad and the site's view of the pilot."""

from __future__ import annotations

import os
from pathlib import Path

from glidein_ext.adfile import read_ad
from glidein_ext.glidein.cacheneed import (
    CacheNeedPublisher,
    cache_need_path,
    glidein_need,
    read_cache_need,
    write_cache_need,
)
from glidein_ext.glidein.info import GlideinInfo, save_info
from glidein_ext.glidein.pilotad import (
    CACHED_INPUT_NEEDED_MB,
    PILOT_AD_FILE,
    PILOT_AD_SCHEMA,
    PilotAdInputs,
    compute_pilot_ad,
)
from glidein_ext.glidein.refresh import refresh
from glidein_ext.site.pilots import pilot_from_ad
from glidein_ext.site.propagate import read_sandbox
from glidein_ext.site.publish import CronRun, render, slot_attributes

NOW = 1_700_000_000


def test_the_core_writes_the_value_only_when_known() -> None:
    ad = compute_pilot_ad(PilotAdInputs(1, 0, cached_input_needed_mb=700), now=10)
    assert ad[CACHED_INPUT_NEEDED_MB] == 700
    assert CACHED_INPUT_NEEDED_MB not in compute_pilot_ad(PilotAdInputs(1, 0), now=10)
    assert (
        compute_pilot_ad(PilotAdInputs(1, 0, cached_input_needed_mb=-5), now=10)[
            CACHED_INPUT_NEEDED_MB
        ]
        == 0
    )


def _glidein(tmp_path: Path) -> str:
    save_info(str(tmp_path), GlideinInfo(cpus=1, start_time=NOW - 1000, todie=NOW + 3600))
    return str(tmp_path)


def test_the_agents_value_reaches_pilot_ad(tmp_path: Path) -> None:
    start = _glidein(tmp_path)
    write_cache_need(start, 1400, NOW - 30)
    result = refresh(start, NOW, {})
    assert result.written and result.errors == []
    on_disk = read_ad(os.path.join(start, PILOT_AD_FILE), PILOT_AD_SCHEMA)
    assert on_disk[CACHED_INPUT_NEEDED_MB] == 1400


def test_no_stale_or_bad_hand_off_leaves_the_attribute_out(tmp_path: Path) -> None:
    start = _glidein(tmp_path)
    result = refresh(start, NOW, {})
    assert result.pilot_ad is not None and CACHED_INPUT_NEEDED_MB not in result.pilot_ad
    write_cache_need(start, 1400, NOW - 3600)  # the agent stopped telling an hour ago
    assert read_cache_need(start, NOW) == (None, "")
    result = refresh(start, NOW, {})
    assert result.pilot_ad is not None and CACHED_INPUT_NEEDED_MB not in result.pilot_ad
    Path(cache_need_path(start)).write_text("CACHED_INPUT_NEEDED_MB = 1 + 1\n", encoding="utf-8")
    result = refresh(start, NOW, {})
    assert result.pilot_ad is not None and CACHED_INPUT_NEEDED_MB not in result.pilot_ad
    assert result.written and any("cache-need.ad" in error for error in result.errors)


def test_the_site_cron_publishes_it_prefixed_and_the_site_reads_it(tmp_path: Path) -> None:
    start = _glidein(tmp_path)
    write_cache_need(start, 250, NOW)
    refresh(start, NOW, {})
    reading = read_sandbox(start, "slot1_1", "vm#7.0#1")
    assert reading.error == "" and reading.pilot_ad is not None
    values = dict(slot_attributes(reading, NOW, 600))
    assert values["PILOT_CACHED_INPUT_NEEDED_MB"] == 250
    assert "PILOT_CACHED_INPUT_NEEDED_MB = 250" in render(CronRun(NOW, 600, (reading,)))
    slot_ad = {"Name": "slot1_1@wn1", "RemoteUser": "cms", "Cpus": 1, **values}
    seen = pilot_from_ad(slot_ad)
    assert seen is not None and seen.cached_needed_mb == 250
    # A pilot that does not know: undefined in the slot ad, unknown to the site.
    assert (
        dict(slot_attributes(reading.__class__("slot1_2", None, start), NOW, 600))[
            "PILOT_CACHED_INPUT_NEEDED_MB"
        ]
        is None
    )


def test_a_glideins_value_is_the_union_of_its_fresh_lanes_words() -> None:
    lane0 = ({"/a": 700 * 10**6, "/b": 1}, NOW - 5.0)
    lane1 = ({"/a": 700 * 10**6, "/c": 300 * 10**6}, NOW - 20.0)
    silent = ({"/d": 9 * 10**9}, NOW - 3600.0)  # a lane gone quiet an hour ago
    assert glidein_need([lane0, lane1, silent, None], NOW) == 1001  # /a once, /b rounds up
    assert glidein_need([lane0, None], NOW) == 701
    assert glidein_need([({}, NOW)], NOW) == 0  # known: nothing needed
    assert glidein_need([None, silent], NOW) is None  # nobody knows: unknown, not 0


def test_the_publisher_writes_at_most_every_period_and_only_changes_or_to_stay_fresh(
    tmp_path: Path,
) -> None:
    start = _glidein(tmp_path)
    publisher = CacheNeedPublisher(start, every=30.0, rewrite_after=300.0)
    words = [({"/a": 2 * 10**6}, float(NOW))]
    assert publisher.publish([None], NOW) is None  # unknown: nothing written
    assert not os.path.exists(cache_need_path(start))
    assert publisher.publish(words, NOW + 1) is None  # too soon after the last look
    assert publisher.publish(words, NOW + 30) == 2
    assert read_cache_need(start, NOW + 30) == (2, "")
    assert publisher.publish(words, NOW + 60) is None  # unchanged
    bigger = [({"/a": 2 * 10**6, "/b": 10**6}, float(NOW + 70))]
    assert publisher.publish(bigger, NOW + 75) is None  # changed, but within the period
    assert publisher.publish(bigger, NOW + 90) == 3
    assert publisher.publish(bigger, NOW + 300) is None
    refreshed = [({"/a": 2 * 10**6, "/b": 10**6}, float(NOW + 390))]
    assert publisher.publish(refreshed, NOW + 390) == 3  # unchanged, but rewritten to stay fresh
    assert publisher.writes == 3
    # what the agent wrote is what the refresh copies into .pilot.ad
    result = refresh(start, NOW + 400, {})
    assert result.pilot_ad is not None and result.pilot_ad[CACHED_INPUT_NEEDED_MB] == 3
