"""The error hierarchy drawn in errors.py's docstring is the one the classes make."""

from __future__ import annotations

import inspect
import re

from glidein_ext import errors


def drawn() -> dict[str, str]:
    """{class: parent} from the tree in the module docstring."""
    parents: dict[str, str] = {}
    stack: list[tuple[int, str]] = []
    for line in (errors.__doc__ or "").splitlines():
        names = r"(\w+Error|\w+Missing|\w+NotFound|\w+Forbidden)"
        match = re.match(r"^(\s*)(?:[|+ -]*?)" + names + r"\b", line)
        if match is None or not line.strip() or not line.startswith("    "):
            continue
        name = match.group(2)
        depth = line.index(name)
        while stack and stack[-1][0] >= depth:
            stack.pop()
        if stack:
            parents[name] = stack[-1][1]
        stack.append((depth, name))
    return parents


def defined() -> dict[str, str]:
    found = {}
    for name, cls in inspect.getmembers(errors, inspect.isclass):
        if issubclass(cls, errors.GlideinExtError) and cls is not errors.GlideinExtError:
            found[name] = cls.__bases__[0].__name__
    return found


def test_the_drawing_matches_the_classes() -> None:
    assert drawn() == defined()


def test_exit_codes() -> None:
    assert errors.UsageError("x").exit_code == 2
    assert errors.WorkflowError("x").exit_code == 2
    assert errors.TaskQueueRequestError("x").exit_code == 2
    assert errors.CondorError("x").exit_code == 1
