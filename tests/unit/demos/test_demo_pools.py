"""`demo --site` and `demo --scene handshake` stop only the HTCondor pools they started: a pool
that ran before the demo (another user's, or kept with --keep-pool) runs on after it."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest

from glidein_ext.demos import handshake, site
from glidein_ext.errors import CondorError
from glidein_ext.sandbox.pool import ALL_POOLS, SITE_POOL, VO_POOL, Pool


class FakeSandbox:
    """The sandbox as the demo drives it: ``running`` pools before it starts."""

    calls: ClassVar[list[tuple[str, ...]]] = []
    running: ClassVar[tuple[Pool, ...]] = ()

    def __init__(self, *_: Any) -> None:
        pass

    def on(self, _pool: Pool) -> FakeSandbox:
        return self

    def stopped(self) -> list[Pool]:
        return [p for p in ALL_POOLS if p not in self.running]

    def start(self, pools: tuple[Pool, ...] = ALL_POOLS) -> None:
        self.calls.append(("start", *(p.name for p in pools)))

    def stop(self, pools: tuple[Pool, ...] = ALL_POOLS) -> None:
        self.calls.append(("stop", *(p.name for p in pools)))

    def remove(self, _constraint: str) -> None:
        pass

    def start_glidein(self, *_: Any, **__: Any) -> Any:
        raise CondorError("no HTCondor here")


def _broken(*_: Any, **__: Any) -> Any:
    raise CondorError("no HTCondor here")


@pytest.mark.parametrize(
    ("running", "stopped"),
    [((), ("stop", "site", "vo")), ((SITE_POOL,), ("stop", "vo")), ((SITE_POOL, VO_POOL), None)],
)
@pytest.mark.parametrize("scene", ["site", "handshake"])
def test_the_demo_stops_only_the_pools_it_started(
    monkeypatch: pytest.MonkeyPatch,
    running: tuple[Pool, ...],
    stopped: tuple[str, ...] | None,
    scene: str,
) -> None:
    monkeypatch.setattr(FakeSandbox, "calls", [])
    monkeypatch.setattr(FakeSandbox, "running", running)
    module: Any = site if scene == "site" else handshake
    monkeypatch.setattr(module, "CondorSandbox", FakeSandbox)
    if scene == "site":
        monkeypatch.setattr(site, "start_site_nodes", _broken)
    run = site.run_site_demo if scene == "site" else handshake.run_handshake_demo
    with pytest.raises(CondorError):
        run(lambda _line: None)
    stops = [call for call in FakeSandbox.calls if call[0] == "stop"]
    assert stops == ([] if stopped is None else [stopped])
