"""The one list of assignment methods (``sched.assign.METHODS``): the command lines, the pilot's
settings and the simulator take their choices from it, so a method registered there is accepted
everywhere and an unknown one is refused everywhere with the same line."""

from __future__ import annotations

import click
import pytest

from glidein_ext.agent.settings import AgentSettings
from glidein_ext.cli.assign import assign as assign_command
from glidein_ext.cli.pilot import run as pilot_run_command
from glidein_ext.errors import ConfigError, UsageError
from glidein_ext.sched import assign as methods
from glidein_ext.sched.matrix import RankMatrix
from glidein_ext.sim.config import SimConfig


def _choices(command: click.Command, option: str) -> list[str]:
    (param,) = [p for p in command.params if p.name == option]
    assert isinstance(param.type, click.Choice)
    return list(param.type.choices)


def test_the_command_lines_offer_exactly_the_registered_methods() -> None:
    assert _choices(assign_command, "method") == list(methods.METHODS) == ["optimal", "greedy"]
    assert _choices(pilot_run_command, "assignment") == list(methods.METHODS)
    assert methods.DEFAULT_METHOD in methods.METHODS and methods.FALLBACK_METHOD in methods.METHODS


def test_a_registered_method_is_accepted_everywhere(monkeypatch: pytest.MonkeyPatch) -> None:
    def nobody(matrix: RankMatrix) -> methods.Matching:
        return methods.Matching("nobody", (), (), 0.0)

    registry = {**methods.METHODS, "nobody": methods.Method(nobody, "serves no pilot")}
    monkeypatch.setattr(methods, "METHODS", registry)
    matrix = RankMatrix.from_rows([[1.0]], 1)
    assert methods.assign(matrix, "nobody").served == 0
    assert AgentSettings(assignment="nobody").check().assignment == "nobody"
    assert methods.other_method("optimal") == "greedy" and "nobody: serves no pilot" in (
        methods.methods_help()
    )


def test_an_unknown_method_is_refused_everywhere_with_one_line() -> None:
    line = "unknown assignment method 'best' (choose from optimal, greedy)"
    assert methods.method_problem("best") == line
    with pytest.raises(UsageError, match="choose from optimal, greedy"):
        methods.assign(RankMatrix.from_rows([[1.0]], 1), "best")
    with pytest.raises(ConfigError, match="choose from optimal, greedy"):
        AgentSettings(assignment="best").check()
    with pytest.raises(UsageError, match="choose from optimal, greedy"):
        SimConfig(assignment="best")
