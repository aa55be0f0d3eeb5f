"""A Task Queue task as the job ad FETCH_WORK prints (glidein.handoff.taskad), and the hook side's
checks of it and of the slot ad (glidein.handoff.hooks): pure functions, no HTCondor."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies

from glidein_ext.glidein.handoff import hooks as fetchhook
from glidein_ext.glidein.handoff import taskad
from glidein_ext.glidein.jobad import parse_job_ad


def job(**changes: object) -> taskad.TaskJob:
    values: dict[str, object] = {
        "task_id": 42,
        "attempt": 3,
        "name": 'w1 "s0"',
        "executable": "/usr/bin/sh",
        "arguments": ["-c", "echo it's $HOME; sleep 1", ""],
        "iwd": "/scratch/dir_1/tasks/42.3",
        "stdout": "/scratch/dir_1/tasks/42.3/task.out",
        "stderr": "/scratch/dir_1/tasks/42.3/task.err",
        "owner": "glidein",
        "global_job_id": "g1#tq42.3#1700000000",
        "submitted": 1700000000,
        "max_runtime": 600,
        "request_cpus": 2,
        "request_memory": 512,
        "request_disk": 2048,
        "lane": 1,
        "environment": {"TQ_INPUTS": "/a b/c /d", "PATH": "/usr/bin:/bin"},
    }
    values.update(changes)
    return taskad.TaskJob(**values)  # type: ignore[arg-type]


def new_syntax_words(text: str) -> list[str]:
    """HTCondor's new-syntax words, as the starter splits them: blanks separate, single quotes
    group, '' inside quotes is one quote."""
    words: list[str] = []
    word: str | None = None
    i = 0
    while i < len(text):
        char = text[i]
        if char == "'":
            word, i = word or "", i + 1
            while not (text[i] == "'" and text[i + 1 : i + 2] != "'"):
                word += text[i]
                i += 2 if text[i] == "'" else 1
            i += 1
        elif char.isspace():
            if word is not None:
                words.append(word)
            word, i = None, i + 1
        else:
            word, i = (word or "") + char, i + 1
    return [*words, *([word] if word is not None else [])]


def test_the_job_ad_is_what_the_startd_and_starter_read() -> None:
    classad2 = pytest.importorskip("classad2")  # not on the worker nodes' Python 3.9
    text = taskad.render(job())
    ad = classad2.parseOne(text, classad2.ParserType.Old)
    assert ad["Cmd"] == "/usr/bin/sh" and ad["JobUniverse"] == taskad.VANILLA
    assert ad["Iwd"] == "/scratch/dir_1/tasks/42.3" and ad["Owner"] == "glidein"
    assert (ad["RequestCpus"], ad["RequestMemory"], ad["RequestDisk"]) == (2, 512, 2048)
    # the hooks report by these; the job-time sources and a draining glidein read these
    assert (ad[fetchhook.TASK_ATTR], ad[fetchhook.ATTEMPT_ATTR]) == (42, 3)
    assert ad["AllowedJobDuration"] == 600 and ad["MaxJobRetirementTime"] == 600
    assert ad[taskad.NAME_ATTR] == 'w1 "s0"' and ad["GlobalJobId"] == "g1#tq42.3#1700000000"
    assert new_syntax_words(ad["Arguments"]) == ["-c", "echo it's $HOME; sleep 1", ""]
    env = dict(pair.split("=", 1) for pair in new_syntax_words(ad["Environment"]))
    assert env == {"PATH": "/usr/bin:/bin", "TQ_INPUTS": "/a b/c /d"}
    # the hook prints the object the agent sends, and the hook side reads the task's key back
    assert fetchhook.printed_ad(taskad.job_ad(job())) == text
    assert fetchhook.task_key(parse_job_ad(text)) == (42, 3)
    assert parse_job_ad(text)["glideinexttqsecret"] == job().secret


@pytest.mark.parametrize(
    ("changes", "problem"),
    [
        ({"executable": "sh"}, "absolute path"),
        ({"name": "two\nlines"}, "U\\+000A is not printable"),
        ({"arguments": ["a\x00b"]}, "U\\+0000 is not printable"),
        ({"name": "two\u2028lines"}, "U\\+2028 is not printable"),
        ({"secret": "not hex"}, "secret"),
        ({"environment": {"BAD-NAME": "x"}}, "plain name"),
    ],
)
def test_what_cannot_be_a_job_ad_is_refused(changes: dict[str, object], problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        taskad.render(job(**changes))


def test_the_hook_prints_only_the_fixed_attributes_with_plain_values() -> None:
    ad = taskad.job_ad(job())
    assert fetchhook.printed_ad(None) == "" and fetchhook.printed_ad({}) == ""
    for bad in (
        {**ad, "Extra": 1},  # another attribute
        {k: v for k, v in ad.items() if k != "Owner"},  # a missing one
        {**ad, "RequestMemory": [1]},  # not a plain value
        {**ad, "Owner": 'x"\u2028RequestMemory = 1'},  # a line separator
    ):
        with pytest.raises(ValueError, match=r"other attributes|not a boolean|not printable"):
            fetchhook.printed_ad(bad)
    with pytest.raises(ValueError, match="not an object"):
        fetchhook.printed_ad("Cmd = 1")


# Every character Python's str.splitlines() ends a line at, and more that are not printable.
LINE_ENDS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"


@pytest.mark.parametrize("end", [*LINE_ENDS, "\t", "\u200b", "\x7f", "\ud800"])
def test_no_string_of_a_task_can_add_or_change_an_attribute(end: str) -> None:
    """A task name, argument or environment value holding a line end (U+2028 and the like, which
    a split with str.splitlines() honoured) is refused before it reaches the startd."""
    injected = f'x{end}RequestMemory = 999999{end}Owner = "root"'
    for changes in (
        {"name": injected},
        {"arguments": ["-c", injected]},
        {"environment": {"TQ_TASK_NAME": injected}},
        {"executable": f"/bin/{injected}"},
    ):
        with pytest.raises(ValueError, match="not printable"):
            taskad.render(job(**changes))


def test_the_quoting_is_what_htcondor_reads_back() -> None:
    """Any printable string, quotes and backslashes included, reads back unchanged with
    HTCondor's own old-syntax parser, on one line."""
    classad2 = pytest.importorskip("classad2")  # not on the worker nodes' Python 3.9

    alphabet = strategies.characters(categories=["L", "M", "N", "P", "S", "Zs"])
    printable = strategies.text(alphabet=alphabet, max_size=40).filter(str.isprintable)
    tricky = strategies.text(alphabet='\\" x', max_size=12)

    @settings(max_examples=300, deadline=None)
    @given(value=strategies.one_of(printable, tricky))
    def check(value: str) -> None:
        line = f"A = {taskad.classad_string(value)}\n"
        assert line.count("\n") == 1 and len(line.splitlines()) == 1
        ad = classad2.parseOne(line + "B = 1\n", classad2.ParserType.Old)
        assert dict(ad) == {"A": value, "B": 1}

    check()


SLOT = """\
Name = "slot1@g1@host"
State = "Unclaimed"
PartitionableSlot = true
Cpus = 3
Memory = 1536
Disk = 90000
TotalSlotCpus = 4
TotalSlotMemory = 2048
"""


def test_only_a_free_slot_of_a_glidein_that_is_not_retiring_asks() -> None:
    request = fetchhook.slot_request(parse_job_ad(SLOT))
    assert request == {
        "name": "slot1@g1@host",
        "partitionable": True,
        "cpus": 3,
        "memory": 1536,
        "disk": 90000,
        "total_cpus": 4,
        "total_memory": 2048,
    }
    assert fetchhook.slot_request(parse_job_ad(SLOT + "GLIDEIN_RetireNow = true\n")) is None
    assert fetchhook.slot_request(parse_job_ad(SLOT + "DynamicSlot = true\n")) is None
    claimed = SLOT.replace('"Unclaimed"', '"Claimed"')
    assert fetchhook.slot_request(parse_job_ad(claimed)) is None
    assert fetchhook.slot_request(parse_job_ad(SLOT.replace("Cpus = 3\n", ""))) is None


def test_reply_and_evict_inputs_are_split_at_the_separator() -> None:
    job_ad, slot_ad = fetchhook.split_ads(f"A = 1\n{fetchhook.AD_SEPARATOR}\nB = 2\n")
    assert (job_ad, slot_ad) == ("A = 1", "B = 2\n")
    assert fetchhook.split_ads(f"{fetchhook.AD_SEPARATOR}\nB = 2\n") == ("", "B = 2\n")
    assert fetchhook.task_key(parse_job_ad("ClusterId = 1\n")) is None  # a VO user's job


@pytest.mark.parametrize("end", [c for c in LINE_ENDS if c not in "\n\r"])
def test_a_string_of_a_job_ad_is_no_attribute_of_the_hooks(end: str) -> None:
    """The hooks read the job ad HTCondor gives them line by line at "\\n" only: a VO job's
    string holding another line end does not make it a Task Queue task."""
    text = f'Arguments = "x{end}GlideinExtTqTask = 5{end}GlideinExtTqAttempt = 1"\nClusterId = 9\n'
    ad = parse_job_ad(text)
    assert fetchhook.task_key(ad) is None and ad["clusterid"] == 9
