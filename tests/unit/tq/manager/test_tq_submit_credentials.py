"""The PilotManager's per-pilot credentials, against a fake schedd: what the submit description
carries (no secret in the environment or arguments), the files transferred (one private file per
job, mode 0600 in a 0700 directory, gone after the submit), the credentials bound to their jobs,
and everything withdrawn when the submit fails."""

from __future__ import annotations

import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from glidein_ext.errors import CondorError
from glidein_ext.tq.client.credentials import secret_hash
from glidein_ext.tq.manager.pilot_submit import (
    CREDENTIAL_DIR,
    CREDENTIAL_ID,
    TOKEN_FILE,
    PilotJob,
    PilotManager,
    pilot_description,
)
from glidein_ext.tq.service.db import make_engine, migrate
from glidein_ext.tq.service.store import Store

JOB = PilotJob(
    tq_url="https://tq.example.org:8765",
    workdir_base="/scratch/pilots",
    executable="/opt/glidein-ext/bin/glidein-ext",
    environment={"PATH": "/usr/bin:/bin"},
    extra_args=("--max-idle", "600"),
    ttl=3600,
)


class Result:
    def __init__(self, cluster: int, procs: int) -> None:
        self._cluster, self._procs = cluster, procs

    def cluster(self) -> int:
        return self._cluster

    def num_procs(self) -> int:
        return self._procs


class FakeSchedd:
    """Records the submit and what the credential files were when the schedd would read them."""

    def __init__(self, fail_spool: bool = False) -> None:
        self.fail_spool = fail_spool
        self.description: dict[str, str] = {}
        self.items: list[dict[str, str]] = []
        self.files: list[tuple[str, int, int]] = []  # content, file mode, directory mode
        self.spooled = False
        self.removed: list[Any] = []

    def submit(self, description: Any, spool: bool = False, itemdata: Any = None) -> Result:
        assert spool, "the credential files must be spooled"
        self.description = dict(description)
        self.items = list(itemdata)
        return Result(41, len(self.items))

    def spool(self, result: Result) -> None:
        for item in self.items:
            path = Path(item[CREDENTIAL_DIR]) / TOKEN_FILE
            self.files.append(
                (
                    path.read_text(),
                    stat.S_IMODE(path.stat().st_mode),
                    stat.S_IMODE(path.parent.stat().st_mode),
                )
            )
            assert stat.S_IMODE(path.parent.parent.stat().st_mode) == 0o700
        if self.fail_spool:
            raise RuntimeError("spooling failed")
        self.spooled = True

    def act(self, action: Any, spec: Any) -> None:
        self.removed.append(spec)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    engine = make_engine(str(tmp_path / "tq.sqlite"))
    migrate(engine)
    made = Store(engine)
    made.load()
    yield made
    engine.dispose()


def manager_with(schedd: FakeSchedd, store: Store, monkeypatch: pytest.MonkeyPatch) -> PilotManager:
    manager = PilotManager("pool.example.org", credentials=store)
    monkeypatch.setattr(manager, "_schedd", lambda: schedd)
    return manager


def test_each_job_gets_its_own_private_credential_file_and_no_secret_in_its_ad(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    schedd = FakeSchedd()
    batch_ids = manager_with(schedd, store, monkeypatch).submit("T2_X", 3, JOB)
    assert batch_ids == ["41.0", "41.1", "41.2"] and schedd.spooled
    credentials = store.credentials()
    assert [c.site for c in credentials] == ["T2_X"] * 3
    assert [c.batch_id for c in credentials] == batch_ids  # bound to their jobs
    assert [item[CREDENTIAL_ID] for item in schedd.items] == [str(c.id) for c in credentials]

    # the files: one secret per job, each a valid credential of the site, 0600 in 0700
    secrets = [content.strip() for content, _, _ in schedd.files]
    assert len(set(secrets)) == 3 and all(s.startswith("gxp_") for s in secrets)
    assert {(mode, home) for _, mode, home in schedd.files} == {(0o600, 0o700)}
    found = [store.credential_by_hash(secret_hash(secret)) for secret in secrets]
    assert [c.id if c else None for c in found] == [c.id for c in credentials]
    # ... and gone once the submit returned (the schedd has its spooled copy)
    assert not any(Path(item[CREDENTIAL_DIR]).exists() for item in schedd.items)

    # the description: the file transferred, the agent pointed at it, no secret anywhere
    description = schedd.description
    assert description["transfer_input_files"] == f"$({CREDENTIAL_DIR})/{TOKEN_FILE}"
    assert description["should_transfer_files"] == "YES"
    assert description["leave_in_queue"] == "false"
    assert description["My.GlideinExtTqCredential"] == f"$({CREDENTIAL_ID})"
    assert "--token-file tq-credential" in description["arguments"]
    everything = " ".join(f"{k}={v}" for k, v in description.items())
    assert not any(secret in everything for secret in secrets)
    assert "gxp_" not in everything and "TOKEN" not in description["environment"]
    assert "GLIDEIN_EXT_TQ_BATCH_ID=$(ClusterId).$(ProcId)" in description["environment"]
    # the pilot's log stays on the execute side, where it was without file transfer
    assert description["executable"] == "/bin/sh"
    logs = "/scratch/pilots/pilot-$(ClusterId).$(ProcId)"
    assert description["arguments"].startswith(
        f'"-c \'exec ""$@"" >>""$0.out"" 2>>""$0.err""\' {logs} '
        "/opt/glidein-ext/bin/glidein-ext pilot run --tq https://tq.example.org:8765 --site T2_X"
    )
    assert "output" not in description and "error" not in description


def test_a_failed_spool_revokes_the_credentials_and_removes_the_cluster(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    schedd = FakeSchedd(fail_spool=True)
    with pytest.raises(CondorError, match="cannot submit 2 pilot"):
        manager_with(schedd, store, monkeypatch).submit("T2_X", 2, JOB)
    assert [c.state(0) for c in store.credentials()] == ["revoked", "revoked"]
    assert schedd.removed == ["ClusterId == 41"]
    assert not any(Path(item[CREDENTIAL_DIR]).exists() for item in schedd.items)


def test_without_an_issuer_the_description_is_the_plain_one() -> None:
    description = pilot_description("T2_X", JOB)
    assert description["should_transfer_files"] == "NO"
    assert description["executable"] == "/opt/glidein-ext/bin/glidein-ext"
    assert description["output"] == "/scratch/pilots/pilot-$(ClusterId).$(ProcId).out"
    assert "--token-file" not in description["arguments"]


class QuerySchedd:
    """Answers ``query`` with fixed job ads."""

    def __init__(self, ads: list[dict[str, Any]]) -> None:
        self.ads = ads

    def query(self, constraint: str, projection: list[str]) -> list[dict[str, Any]]:
        assert "HoldReasonCode" in projection
        return self.ads


def test_a_job_held_while_its_credential_is_spooled_is_alive(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # right after the spool the schedd holds the jobs until it has their files (code 16): a
    # PilotMonitor pass then must not count them vanished (and submit more)
    ads = [
        {"ClusterId": 41, "ProcId": 0, "JobStatus": 5, "HoldReasonCode": 16},  # spooling
        {"ClusterId": 41, "ProcId": 1, "JobStatus": 5, "HoldReasonCode": 13},  # held: transfer
        {"ClusterId": 41, "ProcId": 2, "JobStatus": 2},
        {"ClusterId": 41, "ProcId": 3, "JobStatus": 4},  # completed
    ]
    manager = PilotManager("pool.example.org")
    monkeypatch.setattr(manager, "_schedd", lambda: QuerySchedd(ads))
    assert manager.alive(["41.0", "41.1", "41.2", "41.3"]) == {"41.0", "41.2"}
