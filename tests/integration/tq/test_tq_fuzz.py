"""A property-based fuzz of the Task Queue's OpenAPI (schemathesis) against a real `tq serve`.

Every operation of the published schema gets cases that fit the schema (positive) and cases that
break it (negative), with the right token (the pilots' calls: a per-pilot credential of site S,
which registered pilots 1..3; the credential's revocation comes last), and some without one; no
answer may be a server error (5xx).  Then the service is killed and restarted on the same SQLite
database: it must start, load every row the fuzz stored (``/healthz`` lists none skipped) and
answer.  Seeded (derandomized) so that a CI run is reproducible; about 6000 calls in 40-60 s
here.
"""

from __future__ import annotations

import json
import signal
import time
import urllib.request
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.core.result import Ok

from glidein_ext.testbed.tq_server import OPERATOR, TqServer

# CPU-heavy: runs in one xdist worker with the other heavy tests (tests/conftest.py).
pytestmark = pytest.mark.heavy

BUDGET = (
    6000  # cases in all, shared by the operations: about a minute here, whatever the API grows to
)
MODES = (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)


def _token(path: str, credential: str) -> str:
    return credential if path.startswith(("/api/v1/pilots", "/api/v1/sites/")) else OPERATOR


def _revocation_last(operation: Any) -> bool:
    return bool(operation.method.upper() == "DELETE" and "credentials" in operation.path)


def _fuzz(
    server: TqServer,
    operation: Any,
    mode: GenerationMode,
    token: str | None,
    seen: Counter[int],
    examples: int,
) -> list[str]:
    """Run the cases of one operation, counting answers by status; the server errors, as lines."""
    errors: list[str] = []
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}

    @settings(
        max_examples=examples,
        derandomize=True,
        deadline=None,
        database=None,
        phases=[Phase.explicit, Phase.generate],  # no shrinking: report, do not minimise
        suppress_health_check=list(HealthCheck),
    )
    @given(case=operation.as_strategy(generation_mode=mode))
    def run(case: Any) -> None:
        response = case.call(base_url=server.url, headers=headers, timeout=30)
        seen[response.status_code] += 1
        if response.status_code >= 500:
            errors.append(
                f"{case.method} {case.formatted_path} {mode.value}: HTTP {response.status_code}"
                f" {response.text[:200]!r} for body {repr(case.body)[:300]}"
            )

    try:
        run()
    except Unsatisfiable:  # nothing to break in it (GET /healthz has no input)
        assert mode is GenerationMode.NEGATIVE
    return errors


def test_the_openapi_fuzz_finds_no_server_error_and_the_tq_restarts(
    tq_server: Callable[..., TqServer],
) -> None:
    server = tq_server(heartbeat_timeout="3600")
    operator = server.operator()
    (credential,) = operator.mint_credentials("S", note="fuzz")
    client = server.pilot(token=credential.secret)
    operator.submit(
        {"tasks": [{"name": f"t{i}", "command": "true", "outputs": [f"/f/{i}"]} for i in range(5)]}
    )
    for index in range(3):  # pilots 1..3 exist: the fuzz reaches past the 404s too
        client.call("POST", "/api/v1/pilots", {"site": "S", "host": f"h{index}"})
    with urllib.request.urlopen(f"{server.url}/openapi.json", timeout=30) as answer:  # noqa: S310
        schema = schemathesis.openapi.from_dict(json.load(answer))
    results = list(schema.get_all_operations())
    assert all(isinstance(result, Ok) for result in results), results
    operations = [result.ok() for result in results if isinstance(result, Ok)]
    operations.sort(key=_revocation_last)  # the pilots' credential stays valid until then
    assert len(operations) >= 8
    seen: Counter[int] = Counter()
    examples = max(50, BUDGET // (3 * len(operations)))  # 3 runs per operation
    started = time.monotonic()
    errors: list[str] = []
    for operation in operations:
        for mode in MODES:
            token = _token(operation.path, credential.secret)
            errors += _fuzz(server, operation, mode, token, seen, examples)
        errors += _fuzz(server, operation, GenerationMode.POSITIVE, None, seen, examples)
    elapsed = time.monotonic() - started
    calls = sum(seen.values())
    print(f"fuzz: {calls} calls, {len(operations)} operations, {elapsed:.0f} s: {dict(seen)}")
    assert errors == [], "\n".join(errors[:20])
    assert calls >= 2 * examples * len(operations)
    assert seen[200] and seen[422] and seen[401] and seen[403] and seen[404]  # past the door
    assert "Traceback" not in server.log()

    server.kill(signal.SIGKILL)
    server.start()
    health = json.loads(urllib.request.urlopen(f"{server.url}/healthz", timeout=30).read())  # noqa: S310
    assert health["status"] == "ok" and health["skipped_rows"] == []
    assert len(operator.status().workflows) >= 1
