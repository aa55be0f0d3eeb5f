"""A Task Queue task as the job ad FETCH_WORK prints (agent.taskad), and the hook side's checks of
it and of the slot ad (glidein.fetchhook): pure functions, no HTCondor."""

from __future__ import annotations

import pytest

from glidein_ext.agent import taskad
from glidein_ext.glidein import fetchhook
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
    # the hook's own check passes it, and the hook side reads the task's key back
    assert fetchhook.checked_ad(text) == text
    assert fetchhook.task_key(parse_job_ad(text)) == (42, 3)


@pytest.mark.parametrize(
    ("changes", "problem"),
    [
        ({"executable": "sh"}, "absolute path"),
        ({"name": "two\nlines"}, "control character"),
        ({"arguments": ["a\x00b"]}, "control character"),
        ({"environment": {"BAD-NAME": "x"}}, "plain name"),
    ],
)
def test_what_cannot_be_a_job_ad_is_refused(changes: dict[str, object], problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        taskad.render(job(**changes))


def test_the_hook_refuses_a_malformed_ad_line() -> None:
    with pytest.raises(ValueError, match="malformed line"):
        fetchhook.checked_ad('Cmd = "/bin/true"\nnot an attribute\n')
    with pytest.raises(ValueError, match="not text"):
        fetchhook.checked_ad(None)
    assert fetchhook.checked_ad("") == ""


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
