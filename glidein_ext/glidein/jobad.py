"""Literal values from a job ClassAd in the old `Attr = value` format (pure).

The starter hands its job hooks the job ad on stdin.  The hook needs a handful of numbers from it
(ClusterId, ProcId, CpusProvisioned, JobCurrentStartDate, the run-time attributes), so this reads
literals only -- integers, reals, booleans, strings -- and skips every expression.  It needs no
HTCondor bindings, which a glidein's python may lack, and it starts fast.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Union

_LINE = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_.]*)\s*=\s*(.*?)\s*$")
_INT = re.compile(r"^[+-]?[0-9]+$")
_REAL = re.compile(r"^[+-]?(?:[0-9]+\.[0-9]*|\.[0-9]+|[0-9]+)(?:[eE][+-]?[0-9]+)?$")
_STRING = re.compile(r'^"((?:[^"\\]|\\.)*)"$')

Literal = Union[int, float, bool, str]


def parse_literal(text: str) -> Literal | None:
    """The literal value of ``text``, or None if it is an expression (or anything else)."""
    if _INT.match(text):
        return int(text)
    if _REAL.match(text):
        return float(text)
    folded = text.lower()
    if folded in ("true", "false"):
        return folded == "true"
    match = _STRING.match(text)
    if match:
        return re.sub(r"\\(.)", r"\1", match.group(1))
    return None


def parse_job_ad(text: str) -> dict[str, Literal]:
    """Map lower-cased attribute names to their literal values; expressions are left out.
    Lines end at ``\\n`` only, as HTCondor writes and reads them (``str.splitlines`` would also
    split a string value at U+2028, NEL... and let it pass for an attribute of its own)."""
    values: dict[str, Literal] = {}
    for line in text.split("\n"):
        match = _LINE.match(line)
        if match is None:
            continue
        value = parse_literal(match.group(2))
        if value is not None:
            values[match.group(1).lower()] = value
    return values


def job_id(ad: Mapping[str, Literal]) -> str | None:
    """GlobalJobId, else ClusterId.ProcId, else None."""
    global_id = ad.get("globaljobid")
    if isinstance(global_id, str) and global_id:
        return global_id
    cluster, proc = ad.get("clusterid"), ad.get("procid")
    if isinstance(cluster, int) and isinstance(proc, int):
        return f"{cluster}.{proc}"
    return None


def job_cpus(ad: Mapping[str, Literal]) -> int:
    """CPUs the job holds: CpusProvisioned (what the dynamic slot got), else RequestCpus, else 1."""
    for attr in ("cpusprovisioned", "requestcpus"):
        value = ad.get(attr)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return 1


def job_start(ad: Mapping[str, Literal], now: int) -> int:
    """When the job (this run of it) started: JobCurrentStartDate, else now."""
    for attr in ("jobcurrentstartdate",):
        value = ad.get(attr)
        if isinstance(value, int) and not isinstance(value, bool) and 0 < value <= now:
            return value
    return now
