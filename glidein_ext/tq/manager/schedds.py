"""Several schedds per site (Lee 2003 4.3 applied to the PilotManager): balance and back off.

A site may list several schedds (``schedds:`` in the sites file, ``tq.manager.sites``), each with
its own
``maxPilots``.  ``ScheddBalancer`` (pure) splits the pilots one PilotMonitor pass wants among
them: each next pilot goes to the schedd with the lowest load (its pilots idle or running, plus
those given in this pass) relative to its limit, never above its limit.  A schedd that fails or
refuses a submit or a query is backed off (``glidein_ext.backoff``: jittered, exponential, from
``backoff_base`` s up to ``backoff_cap`` s) and its throttle (``glidein_ext.throttle``: pilots
per second, Lee 2003 4.3) is cut, so that when it comes back it gets pilots gradually; its share
goes to the others in the same pass.

``MultiScheddSubmitter`` is the edge: the PilotMonitor's ``PilotSubmitter`` over one
``PilotManager`` per schedd, whose batch ids carry the schedd's name (``name/cluster.proc``) so
that ``alive`` and ``remove`` reach the right schedd.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from glidein_ext.backoff import Backoff
from glidein_ext.errors import CondorError
from glidein_ext.throttle import Throttle
from glidein_ext.tq.manager.pilot_submit import CredentialIssuer, PilotJob, PilotManager

log = logging.getLogger("glidein_ext.tq.manager.monitor")


@dataclass(frozen=True)
class ScheddLimit:
    """One schedd of a site: its name, its pool (None: the site's), its own maxPilots."""

    name: str
    max_pilots: int
    pool: str | None = None


class ScheddBalancer:
    """The pure policy: ``split`` a pass's pilots; ``failed``/``succeeded`` after each call."""

    def __init__(
        self,
        schedds: Sequence[ScheddLimit],
        *,
        backoff_base: float = 30.0,
        backoff_cap: float = 1800.0,
        rate: float = 10.0,  # pilots per second a healthy schedd may take (burst: 10 s worth)
        rng: random.Random | None = None,
    ) -> None:
        if not schedds:
            raise ValueError("a balancer needs at least one schedd")
        self.schedds = list(schedds)
        self.backoff = Backoff(base=backoff_base, cap=backoff_cap, rng=rng)
        self.throttles = {
            s.name: Throttle(rate, min_rate=rate / 100, burst=rate * 10, increase=rate / 10)
            for s in self.schedds
        }

    def available(self, now: float) -> list[ScheddLimit]:
        """The schedds not backed off now."""
        return [s for s in self.schedds if self.backoff.ready(s.name, now)]

    def split(self, count: int, loads: Mapping[str, int], now: float) -> dict[str, int]:
        """``count`` pilots over the available schedds (those in ``loads``: their pilots alive
        now), least loaded relative to its limit first; a schedd with no room, backed off or
        without throttle allowance gets none.  May give fewer than ``count`` in all."""
        room = {}
        for schedd in self.available(now):
            if schedd.name not in loads:
                continue
            free = schedd.max_pilots - loads[schedd.name]
            room[schedd.name] = max(0, min(free, self.throttles[schedd.name].allowance(now)))
        given = dict.fromkeys(room, 0)
        limits = {s.name: s.max_pilots for s in self.schedds}
        for _ in range(max(0, count)):
            open_ = [name for name in room if given[name] < room[name]]
            if not open_:
                break
            best = min(open_, key=lambda n: ((loads[n] + given[n]) / max(1, limits[n]), n))
            given[best] += 1
        return {name: n for name, n in given.items() if n}

    def submitted(self, name: str, count: int, now: float) -> None:
        """``count`` pilots went to ``name``: its throttle spends them, it recovers a step."""
        self.throttles[name].take(now, count)
        self.throttles[name].succeeded()
        self.backoff.succeeded(name)

    def answered(self, name: str) -> None:
        """``name`` answered a query: its failures are forgotten."""
        self.backoff.succeeded(name)

    def failed(self, name: str, now: float) -> float:
        """``name`` failed or refused: backed off (the seconds) and throttled."""
        self.throttles[name].failed(now)
        return self.backoff.failed(name, now)


def _split_id(batch_id: str) -> tuple[str, str]:
    """``name/cluster.proc`` -> (name, cluster.proc)."""
    name, _, local = batch_id.rpartition("/")
    return name, local


class MultiScheddSubmitter:
    """The PilotMonitor's ``PilotSubmitter`` over one site's several schedds."""

    def __init__(
        self,
        balancer: ScheddBalancer,
        managers: Mapping[str, PilotManager],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.balancer = balancer
        self.managers = dict(managers)
        self.clock = clock

    def _failed(self, name: str, exc: CondorError) -> None:
        backoff = self.balancer.failed(name, self.clock())
        log.warning("schedd %s failed (backed off %.0f s): %s", name, backoff, exc)

    def alive(self, batch_ids: Sequence[str]) -> set[str]:
        """The batch ids still alive; those of a schedd that cannot be asked now are kept (not
        known to be gone)."""
        by_schedd: dict[str, list[str]] = {}
        for batch_id in batch_ids:
            name, local = _split_id(batch_id)
            by_schedd.setdefault(name, []).append(local)
        found: set[str] = set()
        for name, local_ids in by_schedd.items():
            manager = self.managers.get(name)
            if manager is None or not self.balancer.backoff.ready(name, self.clock()):
                found.update(f"{name}/{b}" for b in local_ids)
                continue
            try:
                found.update(f"{name}/{b}" for b in manager.alive(local_ids))
                self.balancer.answered(name)
            except CondorError as exc:
                self._failed(name, exc)
                found.update(f"{name}/{b}" for b in local_ids)
        return found

    def locate(self) -> None:
        """CondorError unless at least one schedd can be found."""
        errors = []
        for name, manager in self.managers.items():
            try:
                manager.locate()
                return
            except CondorError as exc:
                errors.append(f"{name}: {exc}")
        raise CondorError("no schedd of the site can be reached: " + "; ".join(errors))

    def loads(self, site: str) -> dict[str, int]:
        """The site's alive pilots per available schedd (a schedd that fails is backed off)."""
        found = {}
        for schedd in self.balancer.available(self.clock()):
            try:
                found[schedd.name] = self.managers[schedd.name].load(site)
                self.balancer.answered(schedd.name)
            except CondorError as exc:
                self._failed(schedd.name, exc)
        return found

    def submit(self, site: str, count: int, job: PilotJob) -> list[str]:
        """``count`` pilots spread by the balancer; a schedd that fails passes its share to the
        others.  CondorError only if pilots were wanted and none could be submitted anywhere."""
        if count <= 0:
            return []
        loads = self.loads(site)
        submitted: list[str] = []
        errors: list[str] = []
        while len(submitted) < count:
            plan = self.balancer.split(count - len(submitted), loads, self.clock())
            if not plan:
                break
            for name, n in plan.items():
                manager_job = dataclasses.replace(job, batch_prefix=f"{name}/")
                try:
                    ids = self.managers[name].submit(site, n, manager_job)
                except CondorError as exc:
                    self._failed(name, exc)
                    errors.append(f"{name}: {exc}")
                    loads.pop(name, None)
                    continue
                self.balancer.submitted(name, len(ids), self.clock())
                loads[name] = loads.get(name, 0) + len(ids)
                submitted.extend(ids)
        if not submitted and errors:
            raise CondorError(f"no schedd of {site} took its pilots: " + "; ".join(errors))
        return submitted

    def remove(self, batch_ids: Sequence[str]) -> None:
        by_schedd: dict[str, list[str]] = {}
        for batch_id in batch_ids:
            name, local = _split_id(batch_id)
            by_schedd.setdefault(name, []).append(local)
        for name, local_ids in by_schedd.items():
            if name in self.managers:
                self.managers[name].remove(local_ids)


def submitter_for(
    pool: str | None,
    schedds: Sequence[ScheddLimit],
    credentials: CredentialIssuer | None,
) -> MultiScheddSubmitter:
    """One site's submitter over its ``schedds`` (each in its own pool, else ``pool``)."""
    managers = {
        s.name: PilotManager(s.pool or pool, s.name, credentials=credentials) for s in schedds
    }
    return MultiScheddSubmitter(ScheddBalancer(schedds), managers)
