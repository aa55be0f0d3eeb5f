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

The agent answers a fetch with the job ad as an object (``handoff.taskad``), which the hook prints
with :func:`~glidein_ext.glidein.handoff.taskad.render_ad`: the fixed attributes, one a line, each
string strictly quoted.  Every call about a task carries the task's hand-off secret, which the
hook reads from the job ad HTCondor gives it on stdin (``GlideinExtTqSecret``).

The per-hook functions raise (``AgentLinkError``, ``ValueError``); :func:`run_fetch_hook` keeps
HTCondor's output contract whatever happens and returns what to print (``glidein_ext.entry``'s
fast path and ``glidein-ext hook`` print it).  Python 3.9, standard library only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from glidein_ext.errors import AgentLinkError
from glidein_ext.glidein.handoff import link, taskad
from glidein_ext.glidein.handoff.taskad import ATTEMPT_ATTR, SECRET_ATTR, TASK_ATTR
from glidein_ext.glidein.jobad import Literal, parse_job_ad

__all__ = ["ATTEMPT_ATTR", "SECRET_ATTR", "TASK_ATTR", "HookResult", "run_fetch_hook"]
AD_SEPARATOR = "-----"
FETCH_TIMEOUT = 10.0  # the agent waits a little for a task (see agent.board), never this long
CALL_TIMEOUT = 5.0
# JOB_EXIT is tried until the agent takes it, within the starter's wait for the hook
# (<Keyword>_HOOK_JOB_EXIT_TIMEOUT, 30 s by default): a lost JOB_EXIT makes the task "evicted".
JOB_EXIT_RETRY_FOR = 25.0
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


def task_request(op: str, ad: Mapping[str, Literal]) -> dict[str, Any] | None:
    """A request about the task of job ad ``ad``, with its key and secret (None: not a task)."""
    key = task_key(ad)
    if key is None:
        return None
    secret = ad.get(SECRET_ATTR.lower())
    return {
        "op": op,
        "task": key[0],
        "attempt": key[1],
        "secret": secret if isinstance(secret, str) else "",
    }


def printed_ad(answer: Any) -> str:
    """The text FETCH_WORK prints for the agent's answer: its job ad object rendered, or "" for
    no work (ValueError for anything but the fixed attributes with plain values)."""
    if answer is None or answer == {}:
        return ""
    return taskad.render_ad(answer)


def fetch_work(start_dir: str, slot_ad_text: str) -> str:
    """FETCH_WORK: the job ad to print for this slot, or "" (no work)."""
    request = slot_request(parse_job_ad(slot_ad_text))
    if request is None:
        return ""
    answer = link.call(start_dir, {"op": "fetch", "slot": request}, FETCH_TIMEOUT)
    return printed_ad(answer.get("ad"))


def reply_fetch(start_dir: str, verdict: str, stdin_text: str) -> None:
    """REPLY_FETCH: tell the agent whether the startd took the task."""
    if verdict not in ("accept", "reject"):
        raise ValueError(f"REPLY_FETCH argument {verdict!r} is neither accept nor reject")
    request = task_request("reply", parse_job_ad(split_ads(stdin_text)[0]))
    if request is None:
        return  # not one of ours
    link.call(start_dir, {**request, "accept": verdict == "accept"}, CALL_TIMEOUT)


def evict_claim(start_dir: str, stdin_text: str) -> None:
    """EVICT_CLAIM: the startd evicts the claim that ran (or runs) a task."""
    request = task_request("evict", parse_job_ad(split_ads(stdin_text)[0]))
    if request is not None:
        link.call(start_dir, request, CALL_TIMEOUT)


def task_starting(start_dir: str, ad: Mapping[str, Literal], starter_pid: int) -> None:
    """PREPARE_JOB of a task: AgentLinkError if the agent does not hold it (the job must not
    run: another pilot may have it by now) or cannot be reached (nobody would report it).
    The agent checks for itself that the caller is a condor_starter's child (``starter_pid`` is
    only said for the log)."""
    request = task_request("prepare", ad)
    if request is None:
        return
    answer = link.call(start_dir, {**request, "starter": starter_pid}, CALL_TIMEOUT)
    if answer.get("ok") is not True:
        raise AgentLinkError(
            f"the agent does not run task {request['task']}.{request['attempt']}: {answer}"
        )


def task_exited(start_dir: str, ad: Mapping[str, Literal], reason: str) -> None:
    """JOB_EXIT of a task: how it ended (``exit``, ``evict``, ``remove``, ``hold``)."""
    request = task_request("exit", ad)
    if request is None:
        return
    request = {
        **request,
        "reason": reason if reason in _EXIT_REASONS else "exit",
        "by_signal": ad.get("exitbysignal") is True,
        "exit_code": _int(ad, "ExitCode"),
        "signal": _int(ad, "ExitSignal"),
        "duration": _int(ad, "JobDuration"),
    }
    link.call_until(start_dir, request, CALL_TIMEOUT, JOB_EXIT_RETRY_FOR)


@dataclass(frozen=True)
class HookResult:
    """What a hook prints (stdout: a job ad or nothing), its problems (stderr, one line each) and
    its exit status."""

    out: str = ""
    problems: tuple[str, ...] = ()
    status: int = 0


def run_fetch_hook(kind: str, start_dir: str, verdict: str, stdin_text: str) -> HookResult:
    """FETCH_WORK, REPLY_FETCH or EVICT_CLAIM (``kind`` fetch-work, reply-fetch, evict-claim);
    never raises: on any failure the hook prints no (partial) ad and says why.  The startd
    ignores these hooks' exit status."""
    try:
        if kind == "fetch-work":
            return HookResult(out=fetch_work(start_dir, stdin_text))
        if kind == "reply-fetch":
            reply_fetch(start_dir, verdict, stdin_text)
        elif kind == "evict-claim":
            evict_claim(start_dir, stdin_text)
        else:
            raise ValueError(f"no fetch hook {kind!r}")
    except Exception as exc:  # noqa: BLE001 -- the hook contract: no (partial) ad, say why
        return HookResult(problems=(str(exc),))
    return HookResult()
