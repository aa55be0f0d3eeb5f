"""Hostile workflow data: the parser raises WorkflowError, one short line,
for anything it refuses, and never anything else; what it accepts the store can hold."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from glidein_ext.errors import WorkflowError
from glidein_ext.tq.client.limits import BOUNDS, lfn_problem
from glidein_ext.tq.datafile import MAX_DEPTH, load_yaml
from glidein_ext.tq.workflow import TASK_FIELDS, parse_workflow

FIELDS = sorted(TASK_FIELDS)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40),
    st.sampled_from(["/store/a", "/store/a\x00b", "/" + "x" * 300, "TARGET.Site == ", "true"]),
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
known = st.fixed_dictionaries(
    {"name": st.sampled_from(["t", "u"]) | values, "command": st.just("true") | values},
    optional={name: values for name in FIELDS if name not in {"name", "command"}},
)
unknown = st.dictionaries(st.text(max_size=6) | st.integers(), values, max_size=2)
tasks = st.builds(lambda fields, extra: {**extra, **fields}, known, unknown)
workflows = st.fixed_dictionaries(
    {"tasks": st.lists(tasks, min_size=0, max_size=4)},
    optional={"name": values, "defaults": values, "available": values},
)


def _one_short_line(exc: WorkflowError) -> None:
    text = str(exc)
    assert "\n" not in text and len(text) < 400, text[:1000]


@settings(max_examples=400, derandomize=True, suppress_health_check=list(HealthCheck))
@given(data=st.one_of(values, workflows))
def test_any_data_is_a_workflow_or_one_workflow_error(data: Any) -> None:
    try:
        workflow = parse_workflow(data)
    except WorkflowError as exc:
        _one_short_line(exc)
        return
    for task in workflow.tasks:  # what it accepts is within the TQ's limits
        assert all(lfn_problem(lfn) is None for lfn in (*task.inputs, *task.outputs))
        low, high = BOUNDS["max_runtime"]
        assert low <= task.spec.max_runtime <= high


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("a: &x [1]\nb: *x\n", "aliases"),
        ("a: &x {k: 1}\nb: {<<: *x}\n", "aliases"),
        ("a: " + "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1), "nested more than"),
    ],
)
def test_the_yaml_loader_refuses_aliases_and_depth(text: str, reason: str) -> None:
    with pytest.raises(Exception, match=reason):
        load_yaml(text)


def test_the_yaml_loader_still_reads_plain_yaml() -> None:
    nested = "a: " + "[" * (MAX_DEPTH - 2) + "1" + "]" * (MAX_DEPTH - 2)  # 64 nodes deep
    assert load_yaml("a: &x 1\nb: [x, {c: d}]\n") == {"a": 1, "b": ["x", {"c": "d"}]}
    assert load_yaml(nested)["a"] is not None


def test_error_messages_never_print_whole_values() -> None:
    huge = "x" * 100_000
    for data in (
        {"tasks": [{"name": "t", "command": "c", "step": huge}]},
        {"tasks": [{"name": "t", "command": "c", "requirements": huge + " =="}]},
        {"tasks": [{"name": "t", "command": "c", "outputs": ["/" + huge]}]},
        {"tasks": [{"name": "t", "command": "c", "attributes": {huge: 1}}]},
        {"tasks": [{"name": huge, "command": "c"}]},
        {huge: 1, "tasks": []},
        {"tasks": [{"name": "t", "command": "c", huge: 1}]},
    ):
        with pytest.raises(WorkflowError) as info:
            parse_workflow(data)
        _one_short_line(info.value)
