"""The one boundary over classad2: parse ads and expressions, match, rank (Hasham 2011 §IV-E).

Matching follows HTCondor: two ads match when each one's ``Requirements`` evaluates to true with the
other as TARGET (``symmetricMatch``).  ``Rank`` is a number; undefined, error or a non-number ranks
0.0, and a boolean ranks 1.0 or 0.0, as the negotiator treats them.  An unscoped name is MY's
attribute, else TARGET's, as in HTCondor's daemons (``matchmaking_semantics``): a job's
``Memory >= 2000`` reads the machine's Memory.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Union

import classad2

from glidein_ext.errors import ClassAdError

ClassAd = classad2.ClassAd
# What the library raises for a bad ad or expression: its own exception (the PyPI wheel's; the
# classad2 of HTCondor 23.9's Debian packages, which glideins and worker nodes run, has none) and
# plain ones too.
_OWN_ERROR: type[Exception] = getattr(classad2, "ClassAdException", ValueError)
_FAILURES = (_OWN_ERROR, ValueError, TypeError, RuntimeError)
Scalar = Union[bool, int, float, str]
_SEMANTICS_SET = [False]


def matchmaking_semantics() -> None:
    """Resolve unscoped names as HTCondor's daemons do: MY's attribute, else TARGET's.  The ClassAd
    library holds this process-wide and turns it on the first time it reads an old-syntax ad
    (``condor_status -long``, a ``.job.ad``): set here on purpose, once, so that every match in
    the process -- classad2's and the Task Queue's compiled evaluator -- resolves alike."""
    if not _SEMANTICS_SET[0]:
        list(classad2.parseAds("GlideinExtMatchmaking = true\n"))
        _SEMANTICS_SET[0] = True


def parse_expr(text: str, what: str = "expression") -> classad2.ExprTree:
    """Parse one ClassAd expression; ClassAdError naming ``what`` if it is malformed."""
    if not text.strip():
        raise ClassAdError(f"{what} is empty")
    try:
        return classad2.ExprTree(text)
    except _FAILURES as exc:
        raise ClassAdError(f"{what} is not a valid ClassAd expression: {text!r}") from exc


def make_ad(
    attributes: Mapping[str, Scalar], expressions: Mapping[str, str] | None = None
) -> classad2.ClassAd:
    """An ad from literal attributes plus attributes given as expression text."""
    ad = classad2.ClassAd()
    for name, value in attributes.items():
        ad[name] = value
    for name, text in (expressions or {}).items():
        ad[name] = parse_expr(text, name)
    return ad


def parse_ad(text: str) -> classad2.ClassAd:
    """A new-style (``[a = 1; ...]``) ad; ClassAdError if malformed."""
    try:
        return classad2.ClassAd(text)
    except _FAILURES as exc:
        raise ClassAdError(f"not a valid ClassAd: {text[:80]!r}") from exc


def symmetric_match(left: classad2.ClassAd, right: classad2.ClassAd) -> bool:
    """HTCondor's match: both Requirements are true against each other."""
    matchmaking_semantics()
    return bool(left.symmetricMatch(right))


def rank(my: classad2.ClassAd, target: classad2.ClassAd) -> float:
    """``my``'s Rank of ``target``: a float, 0.0 when absent, undefined or not a number."""
    matchmaking_semantics()
    expr = my.lookup("Rank") if "Rank" in my else None
    if expr is None:
        return 0.0
    value = expr.eval(scope=my, target=target)
    if isinstance(value, classad2.Value):  # UNDEFINED or ERROR: an IntEnum, not a number
        return 0.0
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, (int, float)):
        return float(value)
    return 0.0


def parse_old_ads(text: str) -> list[classad2.ClassAd]:
    """Old-syntax ads, blank-line separated (``condor_status -long``); ClassAdError if malformed
    (its message is the library's)."""
    try:
        return list(classad2.parseAds(text, classad2.ParserType.Old))
    except _FAILURES as exc:
        raise ClassAdError(str(exc)) from exc


def machine_ad(address: str) -> classad2.ClassAd:
    """The ad that locates a startd by its ``MyAddress`` (to send it a command)."""
    return classad2.ClassAd({"MyAddress": address, "MyType": "Machine"})


def plain_values(ad: classad2.ClassAd) -> dict[str, Scalar | None]:
    """Each attribute of ``ad`` evaluated: a plain value, or None where it is none (an
    expression that does not evaluate, undefined, a list...)."""
    out: dict[str, Scalar | None] = {}
    for key in ad:
        try:
            value = ad.eval(key)
        except _FAILURES:
            value = None  # an expression that does not evaluate to a value
        out[key] = value if isinstance(value, (bool, int, float, str)) else None
    return out


def canonical(ad: classad2.ClassAd) -> str:
    """A stable text of ``ad`` (sorted attributes): equal ads give equal texts."""
    return "; ".join(f"{name} = {ad.lookup(name)}" for name in sorted(ad.keys(), key=str.lower))
