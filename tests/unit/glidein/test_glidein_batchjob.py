"""The glidein's own site job (glidein/batchjob.py) and the pool and identity the wrapper's
configuration gives its startd."""

from __future__ import annotations

from pathlib import Path

from glidein_ext.cli.wrapper import default_snippet
from glidein_ext.glidein.batchjob import batch_identity, read_batch_identity, safe_value
from glidein_ext.glidein.info import GlideinInfo
from glidein_ext.glidein.wrapper import WrapperConfig, render_condor_config

JOB_AD = """\
ClusterId = 12
ProcId = 3
GlobalJobId = "ce.site.org#12.3#1700000000"
Owner = "cms"
Requirements = (TARGET.Arch == "X86_64")
"""
MACHINE_AD = 'Name = "slot1_4@wn042.site.org"\nCpus = 8\n'


def test_batch_identity_from_the_starters_ads(tmp_path: Path) -> None:
    (tmp_path / ".job.ad").write_text(JOB_AD)
    (tmp_path / ".machine.ad").write_text(MACHINE_AD)
    env = {
        "_CONDOR_JOB_AD": str(tmp_path / ".job.ad"),
        "_CONDOR_MACHINE_AD": str(tmp_path / ".machine.ad"),
    }
    assert read_batch_identity(env) == {
        "GLIDEIN_SiteWMS": "HTCondor",
        "GLIDEIN_SiteWMS_JobId": "12.3",
        "GLIDEIN_SiteWMS_GlobalJobId": "ce.site.org#12.3#1700000000",
        "GLIDEIN_SiteWMS_Slot": "slot1_4@wn042.site.org",
    }


def test_no_starter_no_identity(tmp_path: Path) -> None:
    assert read_batch_identity({}) == {}
    assert read_batch_identity({"_CONDOR_JOB_AD": str(tmp_path / "missing")}) == {}
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere")
    assert read_batch_identity({"_CONDOR_JOB_AD": str(tmp_path / "link")}) == {}
    # A machine ad alone names no job.
    assert batch_identity({}, {"name": "slot1@wn"}) == {}


def test_values_are_safe_in_a_config_and_a_classad() -> None:
    ident = batch_identity(
        {"clusterid": 1, "procid": 0, "globaljobid": 'x"$(DANGER)\\y'},
        {"name": "slot1@wn\n$(X)"},
    )
    assert ident["GLIDEIN_SiteWMS_GlobalJobId"] == "x___DANGER__y"
    assert ident["GLIDEIN_SiteWMS_Slot"] == "slot1@wn___X_"
    assert safe_value("a" * 500) == "a" * 200
    assert batch_identity({"clusterid": True, "procid": 0}, {}) == {}


def test_wrapper_config_names_the_vo_collector_and_the_site_job(tmp_path: Path) -> None:
    cfg = WrapperConfig(
        start_dir=str(tmp_path),
        cpus=2,
        memory_mb=512,
        name="g1",
        snippet=default_snippet(),
        base_config="/etc/condor/base.config",
        collector="vo-cm.example.org:9619",
        site="T2_XX_Test",
    )
    text = render_condor_config(
        cfg,
        "/bin/glidein-ext",
        GlideinInfo(cpus=2, start_time=1),
        {"GLIDEIN_SiteWMS_JobId": "12.3"},
    )
    lines = text.splitlines()
    # The VO's collector overrides the base config's, before the snippet.
    assert lines.index("COLLECTOR_HOST = vo-cm.example.org:9619") > lines.index(
        "include : /etc/condor/base.config"
    )
    assert 'GLIDEIN_Site = "T2_XX_Test"' in lines
    assert 'GLIDEIN_SiteWMS_JobId = "12.3"' in lines
    assert 'GLIDEIN_ExtName = "g1"' in lines
    published = next(
        line for line in lines if line.startswith("STARTD_ATTRS = $(STARTD_ATTRS) GLIDEIN_ExtName")
    )
    assert published.split()[3:] == ["GLIDEIN_ExtName", "GLIDEIN_Site", "GLIDEIN_SiteWMS_JobId"]
    # Without them: the base config's pool, no site attributes.
    plain = render_condor_config(
        WrapperConfig(str(tmp_path), 2, 512, "g2", default_snippet()),
        "/bin/glidein-ext",
        GlideinInfo(cpus=2, start_time=1),
    )
    assert "COLLECTOR_HOST" not in plain and "GLIDEIN_Site" not in plain
