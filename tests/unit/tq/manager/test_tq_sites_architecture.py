"""The sites file's ``architecture:`` per site (Delgado Peris 2014 §IV), and the service's
default."""

from __future__ import annotations

import pytest

from glidein_ext.errors import ConfigError, SitesFileError
from glidein_ext.tq.manager.sites import parse_sites
from glidein_ext.tq.models import Architecture
from glidein_ext.tq.service.settings import TqSettings

PILOT = {"workdir": "/scratch/pilots"}


def test_a_site_may_choose_its_architecture() -> None:
    data = {
        "defaults": {"pilot": PILOT},
        "sites": {"A": {"maxPilots": 2, "architecture": "distributed"}, "B": {"maxPilots": 1}},
    }
    a, b = parse_sites(data, "sites.yaml")
    assert (a.architecture, b.architecture) == ("distributed", None)
    bad = {"sites": {"A": {"maxPilots": 2, "architecture": "p2p", "pilot": PILOT}}}
    with pytest.raises(SitesFileError, match="architecture"):
        parse_sites(bad, "sites.yaml")


def test_the_services_default_architecture() -> None:
    assert TqSettings().check().default_architecture is Architecture.PRE_DHT
    old = TqSettings(cache_mode="centralized").check()  # the old setting still works
    assert old.default_architecture is Architecture.CENTRALIZED
    new = TqSettings(cache_mode="centralized", architecture="distributed").check()
    assert new.default_architecture is Architecture.DISTRIBUTED
    with pytest.raises(ConfigError, match="architecture"):
        TqSettings(architecture="p2p").check()
