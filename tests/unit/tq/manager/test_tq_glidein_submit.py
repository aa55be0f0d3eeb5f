"""The PilotManager's real glideins: the site job is `glidein-ext wrapper --tq` with the
pilot's credential file, and the PilotMonitor counts a glidein as one pilot per lane (pure)."""

from __future__ import annotations

import pytest

from glidein_ext.errors import CondorError
from glidein_ext.tq.manager.monitor import SitePolicy, Thresholds, decide_site
from glidein_ext.tq.manager.pilot_submit import (
    TOKEN_FILE,
    PilotJob,
    PilotManager,
    glidein_description,
    with_credential_files,
)
from glidein_ext.tq.manager.sites import parse_sites
from tests.unit.tq.manager.test_tq_monitor import FakeBatch, FakeStore

GLIDEIN = PilotJob(
    "http://tq:8765",
    "/scratch/glideins",
    executable="/opt/glidein-ext/bin/glidein-ext",
    cpus=4,
    request_memory=2048,
    collector="vo-cm:9618",
    base_config="/etc/condor/glidein-base.config",
    extra_args=("--fetch-delay", "5"),
    environment={"PATH": "/usr/bin:/bin"},
    ttl=3600,
)


def test_a_glidein_is_the_wrapper_with_the_tq_and_its_credential_file() -> None:
    description = with_credential_files(glidein_description("T2_X", GLIDEIN, TOKEN_FILE))
    arguments = description["arguments"]
    for words in (
        "wrapper --start-dir . --name glidein-T2_X-$(ClusterId).$(ProcId)",
        "--cpus 4 --memory 2048 --collector vo-cm:9618",
        "--base-config /etc/condor/glidein-base.config",
        "--site T2_X --tq http://tq:8765 --tq-token-file tq-credential",
        "--lifetime 3600 --fetch-delay 5",
    ):
        assert words in arguments, arguments
    # its log stays on the execute side; the credential is a transferred file, never in the ad
    assert "/scratch/glideins/glidein-$(ClusterId).$(ProcId)" in arguments
    assert description["transfer_input_files"].endswith(f"/{TOKEN_FILE}")
    assert "GLIDEIN_EXT_TQ_BATCH_ID=$(ClusterId).$(ProcId)" in description["environment"]
    assert (description["request_cpus"], description["request_memory"]) == ("4", "2048")
    assert description["My.GlideinExtGlidein"] == '"glidein-T2_X-$(ClusterId).$(ProcId)"'
    assert "periodic_remove" in description
    assert GLIDEIN.pilots_per_job == 4 and PilotJob("http://tq:1", "/w", cpus=4).pilots_per_job == 1


def test_a_glidein_needs_a_collector_and_a_credential() -> None:
    with pytest.raises(CondorError, match="collector"):
        glidein_description("T2_X", PilotJob("http://tq:1", "/w"), TOKEN_FILE)
    with pytest.raises(CondorError, match="per-pilot credentials"):
        PilotManager().submit("T2_X", 1, GLIDEIN)


def test_the_monitor_counts_a_glidein_as_its_lanes() -> None:
    policy = SitePolicy("T2_X", Thresholds(max_pilots=10), GLIDEIN)
    store, batch = FakeStore(), FakeBatch()
    store.groups = [7]
    decision = decide_site(store, batch, policy, now=0.0)
    assert decision.count == 7 and batch.submitted == [("T2_X", 2)]  # 7 pilots: 2 glideins
    # the two glideins wait in the queue: they cover 8 of the 7 tasks, so none more is sent
    assert decide_site(store, batch, policy, now=1.0).count == 0


def test_the_sites_file_turns_a_site_into_glideins() -> None:
    (site,) = parse_sites(
        {
            "sites": {
                "T2_X": {
                    "maxPilots": 8,
                    "pilot": {
                        "workdir": "/scratch",
                        "cpus": 4,
                        "collector": "vo-cm:9618",
                        "baseConfig": "/etc/condor/glidein-base.config",
                    },
                }
            }
        }
    )
    job = site.policy("http://tq:1").job
    assert (job.collector, job.base_config, job.pilots_per_job) == (
        "vo-cm:9618",
        "/etc/condor/glidein-base.config",
        4,
    )
