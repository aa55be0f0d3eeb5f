"""WLCG Machine/Job Features, directory form (HEPiX MJF): ``$MACHINEFEATURES/shutdowntime`` and
``$JOBFEATURES/shutdowntime_job`` each hold one integer, a unix time.

The same rules as for ad files apply: no symlink, a regular file, small, one integer literal.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from glidein_ext.adfile import INT64_MAX, decode_ad_bytes, read_bounded
from glidein_ext.errors import AdFileError, AdFileMissing

MAX_MJF_BYTES = 4096
MACHINE_SHUTDOWN_KEY = "shutdowntime"
JOB_SHUTDOWN_KEY = "shutdowntime_job"


@dataclass(frozen=True)
class Features:
    """The MJF values this project uses, and any problem met reading them."""

    machine_shutdown: int | None = None
    job_shutdown: int | None = None
    errors: tuple[str, ...] = ()


def read_value(path: str) -> int | None:
    """One integer from an MJF file; None if the file does not exist."""
    try:
        data, _ = read_bounded(path, MAX_MJF_BYTES)
    except AdFileMissing:
        return None
    text = decode_ad_bytes(data, path).strip()
    if not text.isdigit() or len(text) > 19 or int(text) > INT64_MAX:
        raise AdFileError(path, "expected one non-negative integer (a unix time)", 1)
    return int(text)


def read_features(env: Mapping[str, str]) -> Features:
    """Read the shutdown times named by $MACHINEFEATURES and $JOBFEATURES (directory form only)."""
    values: dict[str, int | None] = {"machine": None, "job": None}
    errors: list[str] = []
    for slot, var, key in (
        ("machine", "MACHINEFEATURES", MACHINE_SHUTDOWN_KEY),
        ("job", "JOBFEATURES", JOB_SHUTDOWN_KEY),
    ):
        directory = env.get(var)
        if not directory:
            continue
        if "://" in directory:
            errors.append(f"${var}: only the directory form of MJF is supported")
            continue
        try:
            values[slot] = read_value(os.path.join(directory, key))
        except AdFileError as exc:
            errors.append(str(exc))
    return Features(values["machine"], values["job"], tuple(errors))
