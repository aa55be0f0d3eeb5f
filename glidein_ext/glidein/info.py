"""What a glidein knows about itself, persisted in ``START_DIR/.glidein-ext/glidein.json``.

Written once by whoever starts the glidein (``glidein-ext wrapper``, or the glideinWMS custom script
``scripts/glidein-ext-setup.sh``); read by the startd cron and the job hooks, which are separate,
short-lived processes.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass

from glidein_ext.adfile import write_text_atomic
from glidein_ext.errors import ConfigError, StateError
from glidein_ext.glidein.jobtimes import (
    DEFAULT_EXPECTED_END_SOURCES,
    DEFAULT_MAX_END_SOURCES,
    TimeSource,
    parse_sources,
)
from glidein_ext.glidein.jsonfields import optional_int

STATE_DIR = ".glidein-ext"
INFO_FILE = "glidein.json"
MAX_STATE_BYTES = 1024 * 1024


@dataclass(frozen=True)
class GlideinInfo:
    """The glidein's identity and policy."""

    cpus: int
    start_time: int
    todie: int | None = None
    retire_time: int | None = None
    priority_factor: int = 0
    expected_end_sources: str = DEFAULT_EXPECTED_END_SOURCES
    max_end_sources: str = DEFAULT_MAX_END_SOURCES
    name: str = ""

    def expected_sources(self) -> tuple[TimeSource, ...]:
        return parse_sources(self.expected_end_sources, allow_max=True)

    def max_sources(self) -> tuple[TimeSource, ...]:
        return parse_sources(self.max_end_sources, allow_max=False)


def state_dir(start_dir: str) -> str:
    return os.path.join(start_dir, STATE_DIR)


def ensure_state_dir(start_dir: str) -> str:
    path = state_dir(start_dir)
    try:
        os.makedirs(path, mode=0o755, exist_ok=True)
    except OSError as exc:
        raise StateError(f"cannot create {path}: {exc.strerror}") from None
    return path


def save_info(start_dir: str, info: GlideinInfo) -> None:
    ensure_state_dir(start_dir)
    path = os.path.join(state_dir(start_dir), INFO_FILE)
    write_text_atomic(path, json.dumps(asdict(info), indent=1, sort_keys=True) + "\n")


def load_info(start_dir: str) -> GlideinInfo:
    """Read glidein.json; StateError if it is missing or malformed."""
    path = os.path.join(state_dir(start_dir), INFO_FILE)
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_STATE_BYTES + 1)
    except FileNotFoundError:
        raise StateError(f"{path}: missing (was the glidein started by glidein-ext?)") from None
    except OSError as exc:
        raise StateError(f"{path}: {exc.strerror}") from None
    if len(raw) > MAX_STATE_BYTES:
        raise StateError(f"{path}: too large")
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise StateError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise StateError(f"{path}: not a JSON object")
    try:
        cpus, start, todie, retire_time, priority_factor = (
            optional_int(data, key)
            for key in ("cpus", "start_time", "todie", "retire_time", "priority_factor")
        )
    except ValueError as exc:
        raise StateError(f"{path}: {exc}") from None
    if cpus is None or cpus < 1 or start is None:
        raise StateError(f"{path}: cpus and start_time are required")
    info = GlideinInfo(
        cpus=cpus,
        start_time=start,
        todie=todie,
        retire_time=retire_time,
        priority_factor=priority_factor or 0,
        expected_end_sources=str(data.get("expected_end_sources", DEFAULT_EXPECTED_END_SOURCES)),
        max_end_sources=str(data.get("max_end_sources", DEFAULT_MAX_END_SOURCES)),
        name=str(data.get("name", "")),
    )
    try:
        info.expected_sources()
        info.max_sources()
    except ConfigError as exc:
        raise StateError(f"{path}: {exc}") from None
    return info
