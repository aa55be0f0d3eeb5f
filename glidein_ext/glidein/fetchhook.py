"""The startd's fetch-work hooks and the task side of the starter's job hooks (what HTCondor runs).

A glidein with a Task Queue (``glidein-ext wrapper --tq``) has its startd pull the pilot agent's
tasks through HTCondor's job hooks (``STARTD_JOB_HOOK_KEYWORD = GLIDEINEXT``):

- ``GLIDEINEXT_HOOK_FETCH_WORK`` (slot ad on stdin): a free slot asks the agent for one task and
  prints it as a job ad, or prints nothing (no work, a dynamic or busy slot, a retiring glidein);
- ``GLIDEINEXT_HOOK_REPLY_FETCH accept|reject`` (job ad, ``-----``, slot ad): the startd's verdict;
- ``GLIDEINEXT_HOOK_EVICT_CLAIM`` (job ad, ``-----``, slot ad): the startd evicts a fetched claim;
- the starter's ``PREPARE_JOB`` / ``JOB_EXIT`` for a task (its ad carries ``GlideinExtTqTask``):
  the task starts (the agent may refuse a task it no longer holds: the job is then aborted) and
  ends (how, and its exit code), for the agent's report to the Task Queue.

These functions raise (``AgentLinkError``, ``ValueError``); the fast path in ``glidein_ext.entry``
keeps HTCondor's output contract whatever happens.  Python 3.9, standard library only.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from glidein_ext.errors import AgentLinkError
from glidein_ext.glidein import agentlink
from glidein_ext.glidein.jobad import Literal, parse_job_ad

TASK_ATTR = "GlideinExtTqTask"
ATTEMPT_ATTR = "GlideinExtTqAttempt"
AD_SEPARATOR = "-----"
FETCH_TIMEOUT = 10.0  # the agent waits a little for a task (see agent.board), never this long
CALL_TIMEOUT = 5.0
_AD_LINE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\s*=\s*\S")
_EXIT_REASONS = ("exit", "evict", "remove", "hold")


def split_ads(text: str) -> tuple[str, str]:
    """The job ad and the slot ad of a REPLY_FETCH / EVICT_CLAIM input."""
    head, sep, tail = text.partition(f"\n{AD_SEPARATOR}\n")
    if not sep and text.startswith(f"{AD_SEPARATOR}\n"):
        return "", text[len(AD_SEPARATOR) + 1 :]
    return head, tail


def _int(ad: Mapping[str, Literal], name: str) -> int | None:
    value = ad.get(name.lower())
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value


def task_key(ad: Mapping[str, Literal]) -> tuple[int, int] | None:
    """(task id, attempt) of a job ad that carries a Task Queue task; None for other jobs."""
    task, attempt = _int(ad, TASK_ATTR), _int(ad, ATTEMPT_ATTR)
    if task is None or attempt is None:
        return None
    return task, attempt


def slot_request(slot: Mapping[str, Literal]) -> dict[str, Any] | None:
    """What a fetch tells the agent of the slot, or None when no task may go there at all.

    Only a free slot gets a task: the partitionable slot (what it has left), or an unclaimed
    static slot.  A dynamic slot answers nothing: when its task is done its claim ends and its
    resources go back to the partitionable slot, which asks for the next task.  A retiring
    glidein (GLIDEIN_RetireNow) fetches nothing (Sfiligoi 2013: no new job starts).
    """
    if slot.get("dynamicslot") is True or slot.get("glidein_retirenow") is True:
        return None
    if slot.get("state") != "Unclaimed":
        return None
    cpus = _int(slot, "Cpus")
    memory = _int(slot, "Memory")
    disk = _int(slot, "Disk")
    if cpus is None or memory is None or disk is None:
        return None
    name = slot.get("name")
    return {
        "name": name if isinstance(name, str) else "",
        "partitionable": slot.get("partitionableslot") is True,
        "cpus": cpus,
        "memory": memory,
        "disk": disk,
        "total_cpus": _int(slot, "TotalSlotCpus") or cpus,
        "total_memory": _int(slot, "TotalSlotMemory") or memory,
    }


def checked_ad(text: Any) -> str:
    """The agent's job ad, checked line by line before HTCondor sees it (ValueError if bad)."""
    if not isinstance(text, str):
        raise ValueError("the agent's job ad is not text")
    lines = [line for line in text.splitlines() if line.strip()]
    for line in lines:
        if "\x00" in line or not _AD_LINE.match(line):
            raise ValueError(f"the agent's job ad has a malformed line: {line[:80]!r}")
    return "".join(f"{line}\n" for line in lines)


def fetch_work(start_dir: str, slot_ad_text: str) -> str:
    """FETCH_WORK: the job ad to print for this slot, or "" (no work)."""
    request = slot_request(parse_job_ad(slot_ad_text))
    if request is None:
        return ""
    answer = agentlink.call(start_dir, {"op": "fetch", "slot": request}, FETCH_TIMEOUT)
    return checked_ad(answer.get("ad", ""))


def reply_fetch(start_dir: str, verdict: str, stdin_text: str) -> None:
    """REPLY_FETCH: tell the agent whether the startd took the task."""
    if verdict not in ("accept", "reject"):
        raise ValueError(f"REPLY_FETCH argument {verdict!r} is neither accept nor reject")
    key = task_key(parse_job_ad(split_ads(stdin_text)[0]))
    if key is None:
        return  # not one of ours
    request = {"op": "reply", "task": key[0], "attempt": key[1], "accept": verdict == "accept"}
    agentlink.call(start_dir, request, CALL_TIMEOUT)


def evict_claim(start_dir: str, stdin_text: str) -> None:
    """EVICT_CLAIM: the startd evicts the claim that ran (or runs) a task."""
    key = task_key(parse_job_ad(split_ads(stdin_text)[0]))
    if key is not None:
        agentlink.call(start_dir, {"op": "evict", "task": key[0], "attempt": key[1]}, CALL_TIMEOUT)


def task_starting(start_dir: str, ad: Mapping[str, Literal], starter_pid: int) -> None:
    """PREPARE_JOB of a task: AgentLinkError if the agent does not hold it (the job must not
    run: another pilot may have it by now) or cannot be reached (nobody would report it)."""
    key = task_key(ad)
    if key is None:
        return
    request = {"op": "prepare", "task": key[0], "attempt": key[1], "starter": starter_pid}
    answer = agentlink.call(start_dir, request, CALL_TIMEOUT)
    if answer.get("ok") is not True:
        raise AgentLinkError(f"the agent does not run task {key[0]}.{key[1]}: {answer}")


def task_exited(start_dir: str, ad: Mapping[str, Literal], reason: str) -> None:
    """JOB_EXIT of a task: how it ended (``exit``, ``evict``, ``remove``, ``hold``)."""
    key = task_key(ad)
    if key is None:
        return
    request = {
        "op": "exit",
        "task": key[0],
        "attempt": key[1],
        "reason": reason if reason in _EXIT_REASONS else "exit",
        "by_signal": ad.get("exitbysignal") is True,
        "exit_code": _int(ad, "ExitCode"),
        "signal": _int(ad, "ExitSignal"),
        "duration": _int(ad, "JobDuration"),
    }
    agentlink.call(start_dir, request, CALL_TIMEOUT)
