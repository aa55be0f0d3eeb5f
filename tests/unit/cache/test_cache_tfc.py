"""Trivial File Catalog vectors: CMSSW semantics on a real site's storage.xml (T1_CH_CERN, see
tests/data/T1_CH_CERN_storage.xml for its source) and on storage.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from glidein_ext.cache.tfc import load_catalog, parse_storage_json, parse_storage_xml, substitute
from glidein_ext.errors import CatalogError

DATA = Path(__file__).resolve().parents[2] / "data"
CERN = load_catalog(DATA / "T1_CH_CERN_storage.xml")


# (protocol, destination): [(LFN, its PFN), ...]
CERN_LFN_TO_PFN = {
    # direct: the default rule, /+(.*) -> /castor/cern.ch/cms/$1
    ("direct", "any"): [
        ("/store/data/Run1/RAW/a.root", "/castor/cern.ch/cms/store/data/Run1/RAW/a.root"),
        ("/store/t0temp/x.root", "/eos/cms/store/t0temp/x.root"),
    ],
    # rfio: first specific rule wins over the generic /store/ one
    ("rfio", "any"): [
        ("/store/express/x.root", "root://eoscms//eos/cms/store/express/x.root"),
        ("/store/mc/x.root", "root://eoscms//eos/cms/store/mc/x.root?svcClass=default"),
        # an &amp; in the XML is an & in the PFN
        (
            "/store/t0streamer/s.dat",
            "root://castorcms//castor/cern.ch/cms/store/t0streamer/s.dat"
            "?svcClass=t0streamer&stageHost=castorcms",
        ),
    ],
    # stageout chains to direct when nothing specific matches
    ("stageout", "any"): [
        ("/store/data/x.root", "/castor/cern.ch/cms/store/data/x.root"),
        ("/store/user/u/x.root", "root://eoscms//eos/cms/store/user/u/x.root"),
    ],
    # srmv2 with destination-match: T1 buffer, T2_CH_CERN (EOS), and the fallback
    ("srmv2", "T1_CH_CERN_Buffer"): [
        (
            "/store/data/x.root",
            "srm://srm-cms.cern.ch:8443/srm/managerv2?SFN=/castor/cern.ch/cms/store/data/x.root",
        )
    ],
    ("srmv2", "T2_CH_CERN"): [
        (
            "/store/data/x.root",
            "srm://srm-eoscms.cern.ch:8443/srm/v2/server?SFN=/castor/cern.ch/cms/store/data/x.root",
        )
    ],
    ("srmv2", "any"): [
        (
            "/store/user/u/x.root",
            "srm://srm-eoscms.cern.ch:8443/srm/v2/server?SFN=/eos/cms/store/user/u/x.root",
        )
    ],
}


@pytest.mark.parametrize(
    ("protocol", "destination", "lfn", "pfn"),
    [(*where, lfn, pfn) for where, pairs in CERN_LFN_TO_PFN.items() for lfn, pfn in pairs],
)
def test_cern_lfn_to_pfn(protocol: str, destination: str, lfn: str, pfn: str) -> None:
    assert CERN.lfn_to_pfn(lfn, [protocol], destination) == pfn


def test_cern_chain_then_prefix_rfio() -> None:
    # rfio's generic /store/ rule wins; a non-/store/ LFN is no LFN for current CMSSW ...
    assert CERN.lfn_to_pfn("/user/u/f", ["rfio"]) is None
    # ... unless asked: then rfio's /+user/ rule applies
    relaxed = type(CERN)(CERN.lfn_to_pfn_rules, CERN.pfn_to_lfn_rules, require_store_prefix=False)
    assert relaxed.lfn_to_pfn("/user/u/f", ["rfio"]) == (
        "root://castorcms//castor/cern.ch/user/u/f?svcClass=default"
    )
    assert relaxed.lfn_to_pfn("/foo/bar", ["stageout"]) == "/castor/cern.ch/cms/foo/bar"


def test_protocols_are_tried_in_order() -> None:
    assert (
        CERN.lfn_to_pfn("/store/data/x", ["nosuch", "direct"]) == "/castor/cern.ch/cms/store/data/x"
    )
    assert CERN.lfn_to_pfn("/store/data/x", ["nosuch"]) is None


@pytest.mark.parametrize(
    ("protocol", "pfn", "lfn"),
    [
        ("direct", "/castor/cern.ch/cms/store/data/x.root", "/store/data/x.root"),
        ("rfio", "rfio:/castor/cern.ch/cms/store/data/x.root", "/store/data/x.root"),
        (
            "srmv2",
            "srm://srm-cms.cern.ch:8443/srm/managerv2?SFN=/castor/cern.ch/cms/store/a",
            "/store/a",
        ),
    ],
)
def test_cern_pfn_to_lfn_substitutes_then_chains(protocol: str, pfn: str, lfn: str) -> None:
    assert CERN.pfn_to_lfn(pfn, [protocol]) == lfn


def test_regexes_match_the_whole_name() -> None:
    catalog = parse_storage_xml(
        '<storage-mapping><lfn-to-pfn protocol="p" path-match="/store/a" result="X"/>'
        '<lfn-to-pfn protocol="p" path-match="/store/(.*)" result="Y/$1"/></storage-mapping>'
    )
    assert catalog.lfn_to_pfn("/store/a", ["p"]) == "X"
    assert catalog.lfn_to_pfn("/store/ab", ["p"]) == "Y/ab"  # rule 1 is no prefix match


def test_chain_that_does_not_answer_stops_the_search() -> None:
    catalog = parse_storage_xml(
        "<storage-mapping>"
        '<lfn-to-pfn protocol="base" path-match="/store/mc/(.*)" result="/mc/$1"/>'
        '<lfn-to-pfn protocol="p" chain="base" path-match="/store/(.*)" result="root://h/$1"/>'
        '<lfn-to-pfn protocol="p" path-match="/store/(.*)" result="never/$1"/>'
        "</storage-mapping>"
    )
    assert (
        catalog.lfn_to_pfn("/store/mc/f", ["p"]) == "root://h/$1"
    )  # chained name fails to re-match
    assert catalog.lfn_to_pfn("/store/data/f", ["p"]) is None  # CMSSW: no fallthrough


def test_substitution_is_literal_and_skips_empty_groups() -> None:
    import re

    match = re.fullmatch(r"/(a*)/(b)", "//b")
    assert substitute(match, "$1-$2-$1") == "$1-b-$1"
    match = re.fullmatch(r"(.)(.)(.)(.)(.)(.)(.)(.)(.)(.)", "abcdefghij")
    assert substitute(match, "$10") == "a0"  # $1 is replaced first, as CMSSW's replace_all does


def test_two_level_chain_and_destination_in_json() -> None:
    doc = [
        {
            "site": "T9_XX_Test",
            "volume": "Disk",
            "protocols": [
                {
                    "protocol": "first",
                    "access": "virtual",
                    "rules": [
                        {"lfn": "/+store/user/aaa/(.*)", "pfn": "/store/user/AAA/$1"},
                        {"lfn": "/+store/(.*)", "pfn": "/store/$1"},
                    ],
                },
                {
                    "protocol": "second",
                    "access": "virtual",
                    "rules": [
                        {"lfn": "/+store/(.*)", "pfn": "/pnfs/cms/store/$1", "chain": "first"}
                    ],
                },
                {
                    "protocol": "root",
                    "access": "global-rw",
                    "rules": [{"lfn": "(.*)", "pfn": "root://host.domain/$1", "chain": "second"}],
                },
                {
                    "protocol": "XRootD",
                    "access": "global-ro",
                    "prefix": "root://cmsxrootd.fnal.gov",
                },
            ],
        }
    ]
    catalog = parse_storage_json(json.dumps(doc))
    assert catalog.lfn_to_pfn("/store/group/bha/bho", ["root"]) == (
        "root://host.domain//pnfs/cms/store/group/bha/bho"
    )
    assert catalog.lfn_to_pfn("/store/user/aaa/bho", ["root"]) == (
        "root://host.domain//pnfs/cms/store/user/AAA/bho"
    )
    assert catalog.lfn_to_pfn("/store/group/bha/bho", ["XRootD"]) == (
        "root://cmsxrootd.fnal.gov/store/group/bha/bho"
    )
    for not_an_lfn in ("/bha/bho", "bha", "file:bha", "rfio:/bha/bho"):
        assert catalog.lfn_to_pfn(not_an_lfn, ["root"]) is None
        assert catalog.lfn_to_pfn(not_an_lfn, ["XRootD"]) is None


def test_json_volume_selection_and_errors(tmp_path: Path) -> None:
    doc = [
        {"site": "S", "volume": "A", "protocols": [{"protocol": "x", "prefix": "root://a"}]},
        {"site": "S", "volume": "B", "protocols": [{"protocol": "x", "prefix": "root://b"}]},
    ]
    path = tmp_path / "storage.json"
    path.write_text(json.dumps(doc))
    assert load_catalog(path).lfn_to_pfn("/store/f", ["x"]) == "root://a/store/f"
    assert load_catalog(path, volume="B").lfn_to_pfn("/store/f", ["x"]) == "root://b/store/f"
    with pytest.raises(CatalogError, match="no volume"):
        load_catalog(path, volume="C")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("<storage-mapping><lfn-to-pfn", "not well-formed"),
        ("<other/>", "expected <storage-mapping>"),
        (
            '<storage-mapping><lfn-to-pfn protocol="p" path-match="(" result=""/>'
            "</storage-mapping>",
            "bad regular expression",
        ),
        ('<!DOCTYPE x [<!ENTITY a "b">]><storage-mapping/>', "DOCTYPE"),
    ],
)
def test_malformed_xml_is_a_catalog_error(text: str, message: str) -> None:
    with pytest.raises(CatalogError, match=message):
        parse_storage_xml(text)
