"""The Task Queue's input files (workflows, the PilotMonitor's sites): read whole, but bounded.

A file is at most ``limit`` bytes, UTF-8, and YAML without anchors' aliases (a few hundred bytes of
aliases expand to gigabytes: the "billion laughs") nested at most ``MAX_DEPTH`` deep; JSON is
bounded the same way.  A refusal is one line naming the file; no value is printed whole.
"""

from __future__ import annotations

import json
import tomllib
from typing import Any

import yaml

from glidein_ext.textfile import Fail, read_bounded_text

MAX_DEPTH = 64  # mappings and lists inside each other; a workflow needs 4


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader that refuses aliases and nesting deeper than MAX_DEPTH."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()  # type: ignore[no-untyped-call]
            raise yaml.composer.ComposerError(
                None, None, "aliases (*name) are not allowed", event.start_mark
            )
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
                raise yaml.composer.ComposerError(
                    None, None, f"nested more than {MAX_DEPTH} deep", mark
                )
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def _first_line(exc: Exception) -> str:
    text = " ".join(str(exc).split())
    return text[:200] if text else type(exc).__name__


def load_yaml(text: str) -> Any:
    """YAML without aliases, nested at most MAX_DEPTH deep; yaml.YAMLError otherwise."""
    loader = _BoundedLoader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def parse_text(path: str, text: str, fail: Fail) -> Any:
    """Parse by the name: ``.json`` JSON, ``.toml`` TOML, anything else YAML (JSON is YAML too)."""
    kind = "JSON" if path.endswith(".json") else "TOML" if path.endswith(".toml") else "YAML"
    try:
        if kind == "JSON":
            return json.loads(text)
        if kind == "TOML":
            return tomllib.loads(text)
        return load_yaml(text)
    except RecursionError:
        raise fail(f"{path} is nested too deeply") from None
    except (ValueError, yaml.YAMLError) as exc:  # JSON's and TOML's errors are ValueErrors;
        # so is an integer of more than 4300 digits (Python's int_max_str_digits)
        raise fail(f"{path} is not valid {kind}: {_first_line(exc)}") from None


def load_file(path: str, limit: int, fail: Fail) -> Any:
    """Read and parse a bounded data file; ``fail(reason)`` for anything wrong with it."""
    return parse_text(path, read_bounded_text(path, limit, fail), fail)
