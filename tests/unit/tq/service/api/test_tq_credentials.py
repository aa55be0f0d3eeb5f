"""Per-pilot credentials over the API, in process: minted by operators, stored hashed, bound to a
site, to the pilots they registered and (PilotManager) to a batch job, revocable.

Every refusal is checked twice: its status (403; 401 for a token that identifies nobody) and the
database, which must be exactly what it was before the call (every table, every row).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import sqlalchemy as sa
from fastapi.testclient import TestClient

from glidein_ext.tq.manager.monitor import Thresholds
from glidein_ext.tq.manager.sites import SiteConfig
from glidein_ext.tq.service import tables
from glidein_ext.tq.service.server import build_app, open_store
from glidein_ext.tq.service.settings import TqSettings
from glidein_ext.tq.service.store import Store

OP = {"Authorization": "Bearer op"}
SHARED = {"Authorization": "Bearer pi"}
DISTRIBUTED = SiteConfig("D", Thresholds(), "/w", architecture="distributed")


def _app(tmp_path: Path) -> tuple[TestClient, Store]:
    config = TqSettings(
        database=str(tmp_path / "tq.sqlite"),
        operator_token="op",  # noqa: S106 (a test token)
        pilot_token="pi",  # noqa: S106
    )
    store = open_store(config, [DISTRIBUTED])
    return TestClient(build_app(store, config)), store


def bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


def mint(client: TestClient, site: str, **options: Any) -> list[dict[str, Any]]:
    answer = client.post("/api/v1/credentials", json={"site": site, **options}, headers=OP)
    assert answer.status_code == 200, answer.text
    minted: list[dict[str, Any]] = answer.json()["credentials"]
    return minted


def snapshot(store: Store) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table."""
    with store.engine.connect() as conn:
        return {
            table.name: sorted(tuple(row) for row in conn.execute(sa.select(table)))
            for table in tables.metadata.sorted_tables
        }


def refused(
    client: TestClient,
    store: Store,
    method: str,
    path: str,
    headers: dict[str, str],
    body: Any = None,
    status: int = 403,
) -> str:
    """The call is answered ``status`` with one line, and changed nothing in the database."""
    before = snapshot(store)
    answer = client.request(method, path, json=body, headers=headers)
    assert answer.status_code == status, (method, path, answer.status_code, answer.text)
    assert snapshot(store) == before, (method, path)
    detail: str = answer.json()["detail"]
    assert "\n" not in detail and len(detail) < 300
    return detail


def register(client: TestClient, headers: dict[str, str], site: str, **extra: Any) -> int:
    body = {"site": site, "host": f"h-{site}", **extra}
    answer = client.post("/api/v1/pilots", json=body, headers=headers)
    assert answer.status_code == 200, answer.text
    pilot_id: int = answer.json()["pilot_id"]
    return pilot_id


def pilot_calls(pilot_id: int) -> list[tuple[str, str, Any]]:
    """Every call of the pilot protocol on ``pilot_id``."""
    path = f"/api/v1/pilots/{pilot_id}"
    done = {"task_id": 1, "attempt": 1, "exit_code": 0, "outputs": ["/o/a0"]}
    return [
        ("POST", f"{path}/request", {"cached": None}),
        ("POST", f"{path}/heartbeat", {"cached": ["/x"]}),
        ("POST", f"{path}/complete", done),
        ("DELETE", path, None),
    ]


def test_a_credential_acts_only_at_its_site_on_its_own_pilots(tmp_path: Path) -> None:
    client, store = _app(tmp_path)
    with client:
        task = {"name": "a0", "command": "true", "outputs": ["/o/a0"]}
        assert client.post("/api/v1/workflows", json={"tasks": [task]}, headers=OP).is_success
        a1, a2 = (bearer(c["secret"]) for c in mint(client, "A", count=2))
        (b1,) = (bearer(c["secret"]) for c in mint(client, "B"))
        mine = register(client, a1, "A")
        other = register(client, a2, "A")
        shared = register(client, SHARED, "A")
        # a task is running on ``mine``: what the refused calls below must not touch
        assert client.post(f"/api/v1/pilots/{mine}/request", json={}, headers=a1).json()["task"]

        # another site: a credential of B cannot register at A
        detail = refused(client, store, "POST", "/api/v1/pilots", b1, {"site": "A", "host": "x"})
        assert detail == "credential 3 (site 'B') cannot register a pilot at site 'A'"
        for method, path, body in pilot_calls(mine):
            # another pilot id: a2's own pilot is ``other``, the shared token's is ``shared``
            assert "is not a pilot of credential 2" in refused(
                client, store, method, path, a2, body
            )
            assert "not a pilot of the shared" in refused(client, store, method, path, SHARED, body)
            refused(client, store, method, path, b1, body)
        for method, path, body in pilot_calls(shared):
            assert "is not a pilot of credential 1" in refused(
                client, store, method, path, a1, body
            )
        for method, path, body in pilot_calls(mine):  # no token, an unknown credential: 401
            refused(client, store, method, path, {}, body, status=401)
            unknown = bearer("gxp_" + "n" * 43)
            refused(client, store, method, path, unknown, body, status=401)

        # its own pilot: everything works
        beat = client.post(f"/api/v1/pilots/{other}/heartbeat", json={}, headers=a2)
        assert beat.status_code == 200
        done = {"task_id": 1, "attempt": 1, "exit_code": 0, "outputs": ["/o/a0"]}
        answer = client.post(f"/api/v1/pilots/{mine}/complete", json=done, headers=a1)
        assert answer.status_code == 200 and answer.json()["accepted"]
        assert client.delete(f"/api/v1/pilots/{mine}", headers=a1).status_code == 200

        # the operator token is still the operators' (and only theirs)
        assert client.get("/api/v1/status", headers=OP).status_code == 200
        assert client.get("/api/v1/credentials", headers=OP).status_code == 200
        refused(client, store, "GET", "/api/v1/status", a1, status=401)
        refused(client, store, "POST", "/api/v1/credentials", a1, {"site": "A"}, status=401)
        refused(client, store, "DELETE", "/api/v1/credentials/1", SHARED, status=401)
        refused(client, store, "POST", "/api/v1/pilots", OP, {"site": "A", "host": "x"}, 401)
        assert client.get("/api/v1/counters", headers=OP).status_code == 200


def test_after_revocation_every_call_is_refused_and_its_pilots_end(tmp_path: Path) -> None:
    client, store = _app(tmp_path)
    with client:
        task = {"name": "t", "command": "true", "max_retries": 0}
        assert client.post("/api/v1/workflows", json={"tasks": [task]}, headers=OP).is_success
        (credential,) = mint(client, "A", note="glidein 12")
        token = bearer(credential["secret"])
        pilot = register(client, token, "A")
        assert client.post(f"/api/v1/pilots/{pilot}/request", json={}, headers=token).json()["task"]
        revoked = client.delete(f"/api/v1/credentials/{credential['id']}", headers=OP)
        assert revoked.json() == {"id": credential["id"], "revoked": True, "pilots": [pilot]}
        # its pilot is lost and its task back in the queue at once
        assert store.task_rows()[0].state == "queued"
        assert client.get("/api/v1/status", headers=OP).json()["pilots"] == {"A": {"lost": 1}}
        for method, path, body in pilot_calls(pilot):
            assert refused(client, store, method, path, token, body) == "credential 1 is revoked"
        body = {"site": "A", "host": "again"}
        refused(client, store, "POST", "/api/v1/pilots", token, body)
        (listed,) = client.get("/api/v1/credentials", headers=OP).json()["credentials"]
        assert listed["revoked_at"] is not None and listed["pilots"] == 1
        assert listed["note"] == "glidein 12" and "secret" not in listed
        # revoking again is harmless; an unknown credential is 404
        again = client.delete(f"/api/v1/credentials/{credential['id']}", headers=OP)
        assert again.status_code == 200 and again.json()["pilots"] == []
        assert client.delete("/api/v1/credentials/99", headers=OP).status_code == 404


def test_a_masters_calls_need_a_credential_of_that_site_and_its_own_pilot(tmp_path: Path) -> None:
    client, store = _app(tmp_path)
    with client:
        assert client.post(
            "/api/v1/workflows", json={"tasks": [{"name": "t", "command": "true"}]}, headers=OP
        ).is_success
        d1, d2 = (bearer(c["secret"]) for c in mint(client, "D", count=2))
        (a1,) = (bearer(c["secret"]) for c in mint(client, "A"))
        master = register(client, d1, "D", dht_address="127.0.0.1:4001")
        worker = register(client, d2, "D", dht_address="127.0.0.1:4002")
        shared = register(client, SHARED, "D", dht_address="127.0.0.1:4003")
        a_pilot = register(client, a1, "A")
        sync = {"pilot_id": master, "epoch": 1, "want": 5, "dead": [worker]}
        assign = {"pilot_id": master, "epoch": 1, "pairs": [{"task_id": 1, "pilot_id": worker}]}
        claim = {"pilot_id": master, "unreachable": [worker]}
        calls = [
            ("/api/v1/sites/D/master", claim),
            ("/api/v1/sites/D/sync", sync),
            ("/api/v1/sites/D/assign", assign),
        ]
        for path, body in calls:
            # a credential of another site, even naming its own pilot
            detail = refused(client, store, "POST", path, a1, {**body, "pilot_id": a_pilot})
            assert detail == "credential 3 (site 'A') cannot act for site 'D'"
            # the site's credential, but not the master's: it cannot act as the master
            assert "is not a pilot of credential 2" in refused(
                client, store, "POST", path, d2, body
            )
            # the shared token cannot act as a credential's pilot, nor a credential as its pilot
            refused(client, store, "POST", path, SHARED, body)
            refused(client, store, "POST", path, d1, {**body, "pilot_id": shared})
            # a pilot id that does not exist is nobody's
            refused(client, store, "POST", path, d1, {**body, "pilot_id": 999})
        # the master's own credential: accepted (the epoch rule comes after)
        answer = client.post("/api/v1/sites/D/sync", json={**sync, "dead": []}, headers=d1)
        assert answer.status_code == 200 and len(answer.json()["tasks"]) == 1
        stale = client.post("/api/v1/sites/D/sync", json={**sync, "epoch": 7}, headers=d1)
        assert stale.status_code == 409
        # revoked: refused, and the master's pilot ends (another may claim the role)
        assert client.delete("/api/v1/credentials/1", headers=OP).json()["pilots"] == [master]
        for path, body in calls:
            assert refused(client, store, "POST", path, d1, body) == "credential 1 is revoked"
        granted = client.post("/api/v1/sites/D/master", json={"pilot_id": worker}, headers=d2)
        assert granted.status_code == 200 and granted.json()["granted"]


def test_a_master_reports_completions_of_its_own_sites_pilots_only(tmp_path: Path) -> None:
    client, store = _app(tmp_path)
    with client:
        task = {"name": "t", "command": "true"}
        assert client.post("/api/v1/workflows", json={"tasks": [task]}, headers=OP).is_success
        (d1,) = (bearer(c["secret"]) for c in mint(client, "D"))
        (a1,) = (bearer(c["secret"]) for c in mint(client, "A"))
        master = register(client, d1, "D", dht_address="127.0.0.1:4001")
        elsewhere = register(client, a1, "A")
        assert client.post(f"/api/v1/pilots/{elsewhere}/request", json={}, headers=a1).json()[
            "task"
        ]
        before = snapshot(store)
        done = {"task_id": 1, "attempt": 1, "exit_code": 0}
        sync = {
            "pilot_id": master,
            "epoch": 1,
            "completions": [{"pilot_id": elsewhere, "completion": done}],
        }
        answer = client.post("/api/v1/sites/D/sync", json=sync, headers=d1)
        assert answer.status_code == 200
        (result,) = answer.json()["results"]
        assert not result["accepted"] and "no live pilot of D" in result["state"]
        after = snapshot(store)
        assert after["tasks"] == before["tasks"] and after["completions"] == before["completions"]


def test_a_credential_bound_to_a_batch_job_registers_for_that_job_only(tmp_path: Path) -> None:
    client, store = _app(tmp_path)
    with client:
        (credential,) = mint(client, "A", ttl=3600)
        assert credential["expires_at"] is not None
        store.record_submission("12.0", "A")
        store.record_submission("12.1", "B")
        store.bind_credentials([(credential["id"], "12.0")])
        token = bearer(credential["secret"])
        body = {"site": "A", "host": "h"}
        detail = refused(
            client, store, "POST", "/api/v1/pilots", token, {**body, "batch_id": "12.1"}
        )
        assert detail == "credential 1 (site 'A') belongs to batch job 12.0, not '12.1'"
        refused(client, store, "POST", "/api/v1/pilots", token, body)
        register(client, token, "A", batch_id="12.0")
        assert store.submissions("A") == {"12.0": "registered"}
        # a submission of another site is never marked by a pilot of this one
        register(client, SHARED, "A", batch_id="12.1")
        assert store.submissions("B") == {"12.1": "inactive"}


def test_a_vanished_jobs_credential_is_revoked(tmp_path: Path) -> None:
    client, store = _app(tmp_path)
    with client:
        kept, lost = store.mint_credentials("A", 2)
        store.bind_credentials([(kept.id, "3.0"), (lost.id, "3.1")])
        for batch in ("3.0", "3.1"):
            store.record_submission(batch, "A")
        store.mark_vanished(["3.1"])
        states = {c.id: c.state(0) for c in store.credentials()}
        assert states == {kept.id: "valid", lost.id: "revoked"}
        refused(
            client,
            store,
            "POST",
            "/api/v1/pilots",
            bearer(lost.secret),
            {"site": "A", "host": "h", "batch_id": "3.1"},
        )


def test_the_task_queue_keeps_no_secret(tmp_path: Path) -> None:
    client, store = _app(tmp_path)
    with client:
        minted = mint(client, "A", count=3)
        register(client, bearer(minted[0]["secret"]), "A")
    store.engine.dispose()
    stored = b"".join(p.read_bytes() for p in tmp_path.glob("tq.sqlite*"))
    for credential in minted:
        assert credential["secret"].encode() not in stored
    with sa.create_engine(f"sqlite:///{tmp_path / 'tq.sqlite'}").connect() as conn:
        hashes = conn.execute(sa.text("SELECT secret_hash FROM credentials")).scalars().all()
    assert len(set(hashes)) == 3 and all(len(h) == 64 for h in hashes)


def test_minting_checks_what_it_is_given(tmp_path: Path) -> None:
    client, store = _app(tmp_path)
    with client:
        for body in (
            {"site": ""},
            {"site": "A\x00"},
            {"site": "A", "count": 0},
            {"site": "A", "count": 10_001},
            {"site": "A", "ttl": 0},
            {"site": "A", "note": "n" * 201},
        ):
            refused(client, store, "POST", "/api/v1/credentials", OP, body, status=422)
