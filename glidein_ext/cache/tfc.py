"""The CMS Trivial File Catalog: LFN <-> PFN by regular-expression rules (Hasham 2011, IV.B).

Jobs name their inputs by LFN and find them through the TFC (Hasham 2011, IV.B: "they use the TFC
to locate the physical location of a file").  Two forms are read:

- ``storage.xml``: ``<storage-mapping>`` with ``<lfn-to-pfn>`` and ``<pfn-to-lfn>`` elements
  carrying ``protocol``, ``path-match``, ``result`` and optionally ``destination-match`` and
  ``chain``;
- ``storage.json`` (the Rucio-era form): a list of ``{site, volume, protocols: [{protocol,
  prefix | rules: [{lfn, pfn, chain?}]}]}``; a ``prefix`` is the rule ``/?(.*)`` ->
  ``prefix/$1``.

Matching gives the same answers as CMSSW's FileLocator (read, not copied):

- the protocols asked for are tried in order, the first non-empty answer wins;
- within a protocol the rules are tried in file order, the first rule whose
  ``destination-match`` matches the destination and whose ``path-match`` matches the *whole*
  name wins (no fallthrough to a later rule if its chain then fails);
- lfn-to-pfn applies the chained protocol to the name *first*, then re-matches the rule's
  ``path-match`` against the chained result and substitutes; pfn-to-lfn substitutes first,
  then applies the chain;
- substitution replaces ``$1``, ``$2``... in order, literally, and only for groups that matched
  a non-empty string (an empty or unmatched group leaves ``$i`` in the result, as CMSSW does;
  if the chained name no longer matches, the result template is returned unsubstituted);
- lfn-to-pfn answers only for LFNs starting with ``/store/`` (current CMSSW), unless
  ``require_store_prefix=False``.

Pure: parsing takes text, matching takes strings.  Regexes are Python's ``re`` (the rules in
real catalogs use the common subset of ECMAScript and Python syntax).
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from glidein_ext.errors import CatalogError
from glidein_ext.textfile import read_bounded_text

MAX_CATALOG_BYTES = 4 * 1024 * 1024
DEFAULT_DESTINATION = "any"
LFN_PREFIX = "/store/"
MAX_CHAIN_DEPTH = 16


@dataclass(frozen=True)
class Rule:
    """One ``<lfn-to-pfn>`` / ``<pfn-to-lfn>`` element (or one storage.json rule)."""

    path_match: re.Pattern[str]
    result: str
    destination_match: re.Pattern[str]
    chain: str = ""


@dataclass(frozen=True)
class Catalog:
    """Rules by protocol, in file order, for each direction."""

    lfn_to_pfn_rules: Mapping[str, Sequence[Rule]] = field(default_factory=dict)
    pfn_to_lfn_rules: Mapping[str, Sequence[Rule]] = field(default_factory=dict)
    require_store_prefix: bool = True

    @property
    def protocols(self) -> list[str]:
        return sorted({*self.lfn_to_pfn_rules, *self.pfn_to_lfn_rules})

    def lfn_to_pfn(
        self, lfn: str, protocols: Sequence[str], destination: str = DEFAULT_DESTINATION
    ) -> str | None:
        """The PFN for ``lfn`` by the first protocol that answers, or None."""
        if self.require_store_prefix and not lfn.startswith(LFN_PREFIX):
            return None
        return _convert(self.lfn_to_pfn_rules, protocols, destination, lfn, direct=True)

    def pfn_to_lfn(
        self, pfn: str, protocols: Sequence[str], destination: str = DEFAULT_DESTINATION
    ) -> str | None:
        """The LFN for ``pfn`` by the first protocol that answers, or None."""
        return _convert(self.pfn_to_lfn_rules, protocols, destination, pfn, direct=False)


def _convert(
    rules: Mapping[str, Sequence[Rule]],
    protocols: Sequence[str],
    destination: str,
    name: str,
    *,
    direct: bool,
) -> str | None:
    for protocol in protocols:
        out = _apply(rules, protocol, destination, name, direct, 0)
        if out:
            return out
    return None


def _apply(
    rules: Mapping[str, Sequence[Rule]],
    protocol: str,
    destination: str,
    name: str,
    direct: bool,
    depth: int,
) -> str:
    if depth > MAX_CHAIN_DEPTH:
        raise CatalogError(f"chain of protocols deeper than {MAX_CHAIN_DEPTH} at {protocol!r}")
    for rule in rules.get(protocol, ()):
        if rule.destination_match.fullmatch(destination) is None:
            continue
        if rule.path_match.fullmatch(name) is None:
            continue
        if direct and rule.chain:
            name = _apply(rules, rule.chain, destination, name, direct, depth + 1)
            if not name:
                return ""
        out = substitute(rule.path_match.fullmatch(name), rule.result)
        if not direct and rule.chain:
            out = _apply(rules, rule.chain, destination, out, direct, depth + 1)
        return out
    return ""


def substitute(match: re.Match[str] | None, template: str) -> str:
    """Replace ``$1..$n`` in ``template`` by the non-empty groups of ``match`` (CMSSW's way)."""
    out = template
    if match is None:
        return out
    for number, group in enumerate(match.groups(), start=1):
        if group:
            out = out.replace(f"${number}", group)
    return out


# -- parsing ---------------------------------------------------------------------------------


def _compile(pattern: str, where: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise CatalogError(f"{where}: bad regular expression {pattern!r}: {exc}") from exc


def parse_storage_xml(text: str, source: str = "<storage.xml>") -> Catalog:
    """Parse a ``storage.xml`` Trivial File Catalog."""
    if "<!DOCTYPE" in text or "<!ENTITY" in text:
        raise CatalogError(f"{source}: DOCTYPE/ENTITY declarations are not accepted")
    try:
        root = ET.fromstring(text)  # noqa: S314 - no DTD or entity can reach the parser
    except ET.ParseError as exc:
        raise CatalogError(f"{source}: not well-formed XML: {exc}") from exc
    if root.tag != "storage-mapping":
        raise CatalogError(f"{source}: root element is <{root.tag}>, expected <storage-mapping>")
    direct: dict[str, list[Rule]] = {}
    inverse: dict[str, list[Rule]] = {}
    for number, element in enumerate(root, start=1):
        if element.tag not in {"lfn-to-pfn", "pfn-to-lfn"}:
            continue
        where = f"{source}: <{element.tag}> #{number}"
        protocol = element.get("protocol", "")
        path_match = element.get("path-match")
        if path_match is None:
            raise CatalogError(f"{where}: no path-match attribute")
        rule = Rule(
            path_match=_compile(path_match, where),
            result=element.get("result", ""),
            destination_match=_compile(element.get("destination-match") or ".*", where),
            chain=element.get("chain", ""),
        )
        target = direct if element.tag == "lfn-to-pfn" else inverse
        target.setdefault(protocol, []).append(rule)
    return Catalog(direct, inverse)


def parse_storage_json(
    text: str,
    source: str = "<storage.json>",
    *,
    site: str | None = None,
    volume: str | None = None,
) -> Catalog:
    """Parse a ``storage.json``; pick the entry of ``site``/``volume`` (default: the first).

    storage.json carries lfn-to-pfn rules only, as in CMSSW; its Catalog has no pfn-to-lfn.
    """
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CatalogError(f"{source}: not valid JSON: {exc}") from exc
    if not isinstance(doc, list) or not all(isinstance(e, dict) for e in doc):
        raise CatalogError(f"{source}: expected a list of storage volumes")
    chosen = [
        e
        for e in doc
        if (site is None or e.get("site") == site) and (volume is None or e.get("volume") == volume)
    ]
    if not chosen:
        raise CatalogError(f"{source}: no volume for site={site!r} volume={volume!r}")
    entry = chosen[0]
    protocols = entry.get("protocols")
    if not isinstance(protocols, list):
        raise CatalogError(f"{source}: volume {entry.get('volume')!r} has no protocols list")
    direct: dict[str, list[Rule]] = {}
    any_destination = re.compile(".*")
    for number, proto in enumerate(protocols, start=1):
        where = f"{source}: protocol #{number}"
        if not isinstance(proto, dict) or not isinstance(proto.get("protocol"), str):
            raise CatalogError(f"{where}: expected an object with a 'protocol' name")
        name = proto["protocol"]
        prefix = proto.get("prefix")
        rules = direct.setdefault(name, [])
        if isinstance(prefix, str) and prefix:
            rules.append(Rule(re.compile("/?(.*)"), prefix + "/$1", any_destination))
            continue
        raw_rules = proto.get("rules")
        if not isinstance(raw_rules, list):
            raise CatalogError(f"{where} ({name}): neither a prefix nor a rules list")
        for raw in raw_rules:
            if not isinstance(raw, dict) or not isinstance(raw.get("lfn"), str):
                raise CatalogError(f"{where} ({name}): a rule without an 'lfn' pattern")
            pfn = raw.get("pfn")
            chain = raw.get("chain", "")
            if not isinstance(pfn, str) or not isinstance(chain, str):
                raise CatalogError(f"{where} ({name}): a rule without a 'pfn' string")
            rules.append(Rule(_compile(raw["lfn"], where), pfn, any_destination, chain))
    return Catalog(direct, {})


def load_catalog(
    path: str | Path, *, site: str | None = None, volume: str | None = None
) -> Catalog:
    """Read ``storage.xml`` or ``storage.json`` (chosen by content: JSON starts with '[')."""
    where = Path(path)
    text = read_bounded_text(where, MAX_CATALOG_BYTES, CatalogError, "the catalog ")
    if text.lstrip().startswith("["):
        return parse_storage_json(text, str(where), site=site, volume=volume)
    return parse_storage_xml(text, str(where))
