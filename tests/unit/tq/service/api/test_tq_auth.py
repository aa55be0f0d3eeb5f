"""Who a token stands for and what it may do (``tq.service.api.auth``), with a fake credentials'
table."""

from __future__ import annotations

import re

import pytest

from glidein_ext.errors import TaskQueueForbidden
from glidein_ext.tq.client.credentials import (
    PREFIX,
    CredentialInfo,
    is_credential,
    new_secret,
    secret_hash,
)
from glidein_ext.tq.service.api.auth import (
    Authenticator,
    Principal,
    Refusal,
    check_pilot,
    check_register,
    check_site,
)


class Table:
    """The store's credential lookup, by the hash of the secret."""

    def __init__(self) -> None:
        self.rows: dict[str, CredentialInfo] = {}
        self.lookups = 0

    def add(self, secret: str, info: CredentialInfo) -> None:
        self.rows[secret_hash(secret)] = info

    def credential_by_hash(self, digest: str) -> CredentialInfo | None:
        self.lookups += 1
        return self.rows.get(digest)


def test_secrets_are_random_prefixed_and_stored_as_their_hash() -> None:
    first, second = new_secret(), new_secret()
    assert first != second and first.startswith(PREFIX) and len(first) >= 40
    assert secret_hash(first) != secret_hash(second) and len(secret_hash(first)) == 64
    assert first not in secret_hash(first)
    assert (
        is_credential(first) and not is_credential("op") and not is_credential(PREFIX + "x" * 500)
    )


def test_tokens_identify_operators_shared_pilots_and_credentials() -> None:
    table = Table()
    now = [1000.0]
    auth = Authenticator("op", "pi", table, clock=lambda: now[0])
    valid, revoked, expiring = new_secret(), new_secret(), new_secret()
    table.add(valid, CredentialInfo(1, "A", 0.0, batch_id="7.0"))
    table.add(revoked, CredentialInfo(2, "A", 0.0, revoked_at=500.0))
    table.add(expiring, CredentialInfo(3, "B", 0.0, expires_at=1001.0))

    assert auth.identify(b"op") == Principal(operator=True)
    assert auth.identify(b"pi") == Principal(pilot=True)
    assert auth.identify(valid.encode()) == Principal(
        pilot=True, credential_id=1, site="A", batch_id="7.0"
    )
    assert auth.identify(expiring.encode()) == Principal(pilot=True, credential_id=3, site="B")
    assert auth.identify(revoked.encode()) == Refusal(403, "credential 2 is revoked")
    now[0] = 1001.0
    assert auth.identify(expiring.encode()) == Refusal(403, "credential 3 is expired")
    assert auth.identify(new_secret().encode()) == Refusal(401, "unknown credential")
    looked = table.lookups
    for junk in (b"", b"wrong", b"\xff\xfe", b"gxp_" + b"x" * 300):
        refused = auth.identify(junk)
        assert isinstance(refused, Refusal) and refused.status == 401
    assert table.lookups == looked  # what cannot be a credential is never looked up


def test_without_a_shared_pilot_token_only_credentials_are_pilots() -> None:
    auth = Authenticator("op", "", Table())
    assert auth.identify(b"op") == Principal(operator=True)
    assert isinstance(auth.identify(b"pi"), Refusal)


def test_a_credential_acts_at_its_site_on_its_pilots_only() -> None:
    shared = Principal(pilot=True)
    mine = Principal(pilot=True, credential_id=4, site="A", batch_id="9.1")
    check_register(shared, "anywhere", None)
    check_register(mine, "A", "9.1")
    check_pilot(mine, 10, 4)
    check_pilot(shared, 11, None)
    check_site(mine, "A")
    check_site(shared, "D")
    refusals = [
        (check_register, (mine, "B", "9.1"), "cannot register a pilot at site 'B'"),
        (check_register, (mine, "A", "9.2"), "belongs to batch job 9.1"),
        (check_register, (mine, "A", None), "belongs to batch job 9.1"),
        (check_pilot, (mine, 10, 5), "pilot 10 is not a pilot of credential 4"),
        (check_pilot, (mine, 10, None), "pilot 10 is not a pilot of credential 4"),
        (check_pilot, (shared, 10, 4), "pilot 10 is not a pilot of the shared pilot token"),
        (check_site, (mine, "B"), "credential 4 (site 'A') cannot act for site 'B'"),
    ]
    for check, args, message in refusals:
        with pytest.raises(TaskQueueForbidden, match=re.escape(message)):
            check(*args)  # type: ignore[operator]
