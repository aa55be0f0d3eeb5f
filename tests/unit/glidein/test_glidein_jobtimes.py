"""jobtimes and jobad: where a job's expected and maximum end come from."""

from __future__ import annotations

import pytest

from glidein_ext.errors import ConfigError
from glidein_ext.glidein.jobad import job_cpus, job_id, job_start, parse_job_ad
from glidein_ext.glidein.jobtimes import (
    DEFAULT_EXPECTED_END_SOURCES,
    DEFAULT_MAX_END_SOURCES,
    parse_sources,
    resolve_job_times,
)

EXPECTED = parse_sources(DEFAULT_EXPECTED_END_SOURCES, allow_max=True)
MAXIMUM = parse_sources(DEFAULT_MAX_END_SOURCES, allow_max=False)

STARTER_AD = """\
ClusterId = 12
ProcId = 3
GlobalJobId = "sub.example#12.3#1700000000"
CpusProvisioned = 2
RequestCpus = ifThenElse(MachineCount > 1, 8, 2)
JobCurrentStartDate = 1700000100
JobStartDate = 1600000000
MaxWallTimeMins = 120
EstimatedWallTimeMins = 30.5
Cmd = "/bin/sleep"
WantIt = TRUE
Requirements = (TARGET.Arch == "X86_64") && (TARGET.OpSys == "LINUX")
"""


def test_job_ad_literals_only() -> None:
    ad = parse_job_ad(STARTER_AD)
    assert ad["clusterid"] == 12
    assert ad["estimatedwalltimemins"] == 30.5
    assert ad["cmd"] == "/bin/sleep"
    assert ad["wantit"] is True
    assert "requirements" not in ad
    assert "requestcpus" not in ad  # an expression
    assert job_id(ad) == "sub.example#12.3#1700000000"
    assert job_cpus(ad) == 2
    assert job_start(ad, now=1700000200) == 1700000100


def test_job_id_and_cpus_fallbacks() -> None:
    ad = parse_job_ad("ClusterId = 5\nProcId = 0\nRequestCpus = 4\n")
    assert job_id(ad) == "5.0"
    assert job_cpus(ad) == 4
    assert job_cpus(parse_job_ad("")) == 1
    assert job_id(parse_job_ad("Foo = 1")) is None
    assert job_start(parse_job_ad("JobCurrentStartDate = 99999999999"), now=100) == 100


def test_default_order_uses_the_job_attributes() -> None:
    ad = parse_job_ad(STARTER_AD)
    times = resolve_job_times(ad, 1000, None, EXPECTED, MAXIMUM)
    assert times.max_end == 1000 + 120 * 60
    assert times.max_source == "MaxWallTimeMins"
    assert times.expected_end == 1000 + int(30.5 * 60)
    assert times.expected_source == "EstimatedWallTimeMins"


def test_allowed_job_duration_first() -> None:
    ad = parse_job_ad("AllowedJobDuration = 600\nMaxWallTimeMins = 120\n")
    times = resolve_job_times(ad, 1000, None, EXPECTED, MAXIMUM)
    assert times.max_end == 1600
    assert times.expected_end == 1600  # 'max': no estimate, so the maximum is the estimate


def test_todie_bounds_the_maximum_and_the_default_applies() -> None:
    times = resolve_job_times({}, 1000, 5000, EXPECTED, MAXIMUM)
    assert (times.max_end, times.max_source) == (5000, "todie")
    times = resolve_job_times({}, 1000, None, EXPECTED, MAXIMUM)
    assert (times.max_end, times.max_source) == (1000 + 172800, "default:172800")
    ad = parse_job_ad("MaxWallTimeMins = 1000\n")
    times = resolve_job_times(ad, 1000, 2000, EXPECTED, MAXIMUM)
    assert times.max_end == 2000


def test_expected_end_never_beyond_max() -> None:
    ad = parse_job_ad("EstimatedWallTimeMins = 500\nAllowedJobDuration = 60\n")
    times = resolve_job_times(ad, 0, None, EXPECTED, MAXIMUM)
    assert times.expected_end == times.max_end == 60


def test_custom_order_and_units() -> None:
    expected = parse_sources("ExpectedHours:h, default:100", allow_max=True)
    maximum = parse_sources("default:50000", allow_max=False)
    times = resolve_job_times(parse_job_ad("ExpectedHours = 2\n"), 0, None, expected, maximum)
    assert times.expected_end == 7200
    times = resolve_job_times({}, 0, None, expected, maximum)
    assert times.expected_end == 100


@pytest.mark.parametrize("text", ["", "max", "Foo:years", "default:-5", "1abc:s", "bogus"])
def test_bad_source_lists(text: str) -> None:
    with pytest.raises(ConfigError):
        parse_sources(text, allow_max=False)


def test_non_positive_or_non_numeric_attributes_are_skipped() -> None:
    ad = parse_job_ad('MaxWallTimeMins = 0\nAllowedJobDuration = "60"\n')
    times = resolve_job_times(ad, 0, 900, EXPECTED, MAXIMUM)
    assert times.max_source == "todie"
