"""Fixtures for the integration tests against the real HTCondor pool (scripts/condor-sandbox)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from glidein_ext.sandbox.pool import CondorSandbox


@pytest.fixture(scope="session")
def sandbox() -> Iterator[CondorSandbox]:
    """The chroot pool, built once (cached) and started for this session."""
    if os.geteuid() != 0:
        if os.environ.get("GLIDEIN_EXT_REQUIRE_CONDOR") == "1":
            pytest.fail("the HTCondor integration tests need root (chroot, mount)")
        pytest.skip("the HTCondor integration tests need root (chroot, mount)")
    box = CondorSandbox()
    box.start()  # builds the chroot first if it is not cached
    yield box
    if os.environ.get("GLIDEIN_EXT_KEEP_POOL") != "1":
        box.stop()
