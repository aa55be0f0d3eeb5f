"""Workflow files: one error naming the task and field; the paper's W1/W2/W3 shapes."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from glidein_ext.cli import cli
from glidein_ext.errors import WorkflowError
from glidein_ext.tq.workflow import generate, load_workflow_file, parse_workflow


def _one(**task: Any) -> dict[str, Any]:
    return {"tasks": [{"name": "t", "command": "true", **task}]}


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (_one(requirements="TARGET.Cpus >"), "task 't', field 'requirements'"),
        (_one(rank=3), "task 't', field 'rank'"),
        (_one(inputs="/a"), "task 't', field 'inputs'"),
        (_one(request_cpus=0), "task 't', field 'request_cpus'"),
        (_one(max_runtime=-1), "task 't', field 'max_runtime'"),
        (_one(colour="red"), "task 't', field 'colour'"),
        (_one(after=["nope"]), "task 't', field 'after'"),
        (_one(command=""), "task 't', field 'command'"),
        (_one(attributes={"bad key": 1}), "task 't', field 'attributes'"),
        ({"tasks": []}, "field 'tasks'"),
        ({"tasks": [{"command": "x"}]}, "field 'name'"),
        (
            {"tasks": [{"name": "a", "command": "x"}, {"name": "a", "command": "y"}]},
            "task 'a', field 'name'",
        ),
        (
            {
                "tasks": [
                    {"name": "a", "command": "x", "outputs": ["/f"]},
                    {"name": "b", "command": "y", "outputs": ["/f"]},
                ]
            },
            "task 'b', field 'outputs'",
        ),
        (
            {
                "tasks": [
                    {"name": "a", "command": "x", "inputs": ["/b"], "outputs": ["/a"]},
                    {"name": "b", "command": "y", "inputs": ["/a"], "outputs": ["/b"]},
                ]
            },
            "cycle",
        ),
    ],
)
def test_bad_workflows_name_the_task_and_field(data: dict[str, Any], message: str) -> None:
    with pytest.raises(WorkflowError) as info:
        parse_workflow(data)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_defaults_and_external_inputs() -> None:
    workflow = parse_workflow(
        {
            "defaults": {"requirements": 'TARGET.Site == "A"', "max_runtime": 60},
            "available": ["/raw"],
            "tasks": [
                {"name": "a", "command": "x", "inputs": ["/raw", "/other"], "outputs": ["/a"]},
                {"name": "b", "command": "y", "inputs": ["/a"], "max_runtime": 5},
            ],
        }
    )
    a, b = workflow.tasks
    assert a.spec.requirements == 'TARGET.Site == "A"' and a.spec.max_runtime == 60
    assert b.spec.max_runtime == 5
    assert workflow.external_inputs == frozenset({"/other"})


@pytest.mark.parametrize(
    ("kind", "step0", "step1", "inputs_per_step1"),
    [("w1", 80, 80, 1), ("w2", 40, 80, 1), ("w3", 80, 40, 2)],
)
def test_generators_have_the_seed_shapes(
    kind: str, step0: int, step1: int, inputs_per_step1: int
) -> None:
    workflow = parse_workflow(generate(kind))
    steps = [t.step for t in workflow.tasks]
    assert steps.count(0) == step0 and steps.count(1) == step1
    readers: dict[str, int] = {}
    for task in workflow.tasks:
        if task.step == 1:
            assert len(task.inputs) == inputs_per_step1
            for lfn in task.inputs:
                readers[lfn] = readers.get(lfn, 0) + 1
    assert len(readers) == step0  # every step0 output is read
    assert set(readers.values()) == {2 if kind == "w2" else 1}
    assert workflow.external_inputs == frozenset()


def test_cli_generate_then_a_bad_file_is_one_line(tmp_path: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "w3.yaml"
    result = runner.invoke(cli, ["tq", "generate", "w3", "--scale", "0.1", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert len(load_workflow_file(str(out)).tasks) == 12
    data = yaml.safe_load(out.read_text())
    data["tasks"][3]["rank"] = "1 +"
    out.write_text(yaml.safe_dump(data))
    from glidein_ext.cli import main

    with pytest.raises(SystemExit) as exited:
        main(["tq", "submit", str(out), "--tq", "http://127.0.0.1:9", "--token", "x"])
    assert exited.value.code == 2


def test_equal_specs_are_one_object_and_values_of_other_types_stay_apart() -> None:
    """Tasks with the same spec share one ``MatchSpec`` (its group key made once); attribute
    values that Python takes as equal but ClassAds do not (1, 1.0, true; 0.0, -0.0) keep their
    own specs and group keys."""
    values: list[Any] = [1, 1.0, True, 1, 0.0, -0.0]
    tasks = [
        {"name": f"t{i}", "command": "true", "attributes": {"a": value}}
        for i, value in enumerate(values)
    ]
    tasks += [{"name": "u1", "command": "true"}, {"name": "u2", "command": "true", "rank": "0"}]
    specs = [task.spec for task in parse_workflow({"tasks": tasks}).tasks]
    assert specs[0] is specs[3]  # the same int: one object
    assert specs[6] is specs[7]  # rank "0" is the default
    assert len({id(spec) for spec in specs}) == 6
    assert len({spec.key() for spec in specs}) == 6
    assert [spec.attributes[0][1] for spec in specs[:6]] == values
    assert [type(spec.attributes[0][1]) for spec in specs[:3]] == [int, float, bool]
    assert str(specs[5].attributes[0][1]) == "-0.0"


def test_a_bad_expression_is_refused_every_time_it_is_met() -> None:
    """The expression check is remembered per text: a refused text is refused again, in
    another workflow too, naming that workflow's task."""
    for name in ("first", "second"):
        with pytest.raises(WorkflowError, match=f"task '{name}', field 'requirements'"):
            parse_workflow(
                {"tasks": [{"name": name, "command": "true", "requirements": "TARGET.Cpus >"}]}
            )


@settings(max_examples=400, deadline=None)
@given(
    st.text(
        st.sampled_from([" ", "a", "/", "'", '"', "\\", "\t", "\n", "\x0b", "\xa0", "\u2028", "é"]),
        min_size=1,
        max_size=12,
    )
)
def test_a_command_is_taken_exactly_when_its_shell_words_are_printable(command: str) -> None:
    """The check of a command's words (each goes into a job ad) decides as shlex's split does,
    whether or not the command has quotes (a plain one is not split: its words are its parts)."""
    try:
        words: list[str] | None = shlex.split(command)
    except ValueError:
        words = None
    expected = bool(command.strip()) and words is not None and all(map(str.isprintable, words))
    try:
        parse_workflow({"tasks": [{"name": "t", "command": command}]})
        taken = True
    except WorkflowError:
        taken = False
    assert taken == expected
