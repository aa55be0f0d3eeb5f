"""The one list of victim policies (``site.victims.ORDERS``): every ``Policy`` has its order
there, and the command lines and the simulator offer exactly those; a policy's reason names the
attributes its order reads."""

from __future__ import annotations

import click
import pytest

from glidein_ext.cli.site import controller as controller_command
from glidein_ext.cli.site import victims as victims_command
from glidein_ext.errors import UsageError
from glidein_ext.sim.config import VICTIM_POLICIES, SimConfig
from glidein_ext.site.pilots import Pilot
from glidein_ext.site.victims import (
    ORDERS,
    POLICY_NAMES,
    Policy,
    choose_victims,
    policies_help,
)


def _choices(command: click.Command) -> list[str]:
    (param,) = [p for p in command.params if p.name == "policy"]
    assert isinstance(param.type, click.Choice)
    return list(param.type.choices)


def test_every_policy_has_one_order_and_every_surface_offers_them() -> None:
    assert set(ORDERS) == set(Policy)
    assert list(POLICY_NAMES) == [p.value for p in Policy] == ["waste", "completion", "cache"]
    assert _choices(victims_command) == _choices(controller_command) == list(POLICY_NAMES)
    assert VICTIM_POLICIES == POLICY_NAMES
    assert all(f"{p.value} ({ORDERS[p].attribute})" in policies_help() for p in Policy)
    with pytest.raises(UsageError, match="choose from waste, completion, cache"):
        SimConfig(victim_policy="random")


@pytest.mark.parametrize("policy", list(Policy))
def test_each_policys_reason_names_the_attributes_it_orders_by(policy: Policy) -> None:
    pilots = [
        Pilot(slot=f"s{i}", owner="cms", cpus=1, can_postpone=True, waste1k=i, used1k=0)
        for i in range(2)
    ]
    (victim,) = choose_victims(pilots, {}, 1, policy).victims
    order = ORDERS[policy]
    assert order.attribute in victim.reason
    if order.then is not None:
        assert ORDERS[order.then].attribute in victim.reason
