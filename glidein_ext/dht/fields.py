"""Strict readers of values that came off the wire (``dht.wire``), shared by every decoder of what
pilots tell each other: the site's sealed messages (``distributed.codec``), the TaskList and its
replies (``sched.tasklist``).

Each reader takes the decoded value and a name for it (``"assign.task_id"``), and answers the
value with its Python type or raises :class:`FieldError` (a ``ValueError``) naming the field: a
bool is no integer, an int is a number but a string is not, a list of strings is a tuple.  Pure,
Python 3.9, standard library only.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any


class FieldError(ValueError):
    """A decoded value that is not what its field holds."""


def integer(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise FieldError(f"{what}: expected an integer")
    return value


def number(value: Any, what: str) -> float:
    """A finite number (an int or a float) as a float."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise FieldError(f"{what}: expected a number")
    if not math.isfinite(value):
        raise FieldError(f"{what}: expected a finite number")
    return float(value)


def optional_number(value: Any, what: str) -> float | None:
    return None if value is None else number(value, what)


def text(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise FieldError(f"{what}: expected a string")
    return value


def texts(value: Any, what: str) -> tuple[str, ...]:
    return tuple(text(item, what) for item in items(value, what))


def items(value: Any, what: str, count: int | None = None) -> list[Any]:
    """A list (of exactly ``count`` items when given)."""
    if not isinstance(value, list):
        raise FieldError(f"{what}: expected a list")
    if count is not None and len(value) != count:
        raise FieldError(f"{what}: expected a list of {count}")
    return value


def counts(value: Any, what: str) -> dict[str, int]:
    """A map of names to integers."""
    if not isinstance(value, Mapping):
        raise FieldError(f"{what}: expected a map")
    return {text(k, what): integer(v, what) for k, v in value.items()}


def address(value: Any, what: str) -> tuple[str, int]:
    """A ``[host, port]`` pair."""
    host, port = items(value, what, 2)
    return text(host, what), integer(port, what)


def blob(value: Any, what: str, size: int) -> bytes:
    """Bytes of exactly ``size``."""
    if not isinstance(value, bytes) or len(value) != size:
        raise FieldError(f"{what}: expected {size} bytes")
    return value
