"""A small HTTP client of the Task Queue API, stdlib only (pilots run where pip cannot reach).

HTTP and socket errors are translated here: a 4xx status by the table the service answers with
(``glidein_ext.errors.TQ_HTTP_STATUS``: 401 TaskQueueAuthError, 403 TaskQueueForbidden,
404 TaskQueueNotFound, 409 StaleMasterError, 422 TaskQueueRequestError), a server certificate the
client does not trust TaskQueueTlsError, anything else (or no answer) TaskQueueError.  An
``https://`` URL is verified against ``ca_file`` (else the system's CA store), host name checked;
a pilot's credential is read from a private file (``read_token_file``).
The answers are parsed into the protocol's dataclasses (``tq.client.protocol``); a malformed answer
is a
TaskQueueError naming the call and the field.  Python 3.9 and the standard library only: the
pilot agent runs it.

Several instances (Lee 2003: a pool of equal brokers): the client takes a list of URLs (a
sequence, or one comma-separated string).  Each call tries them in the order of
``tq.client.endpoints.EndpointSet`` (round-robin from a random start; instances that failed lately,
backed off with jitter, last) and fails over to the next on no connection, a timeout or a 5xx
answer; a 4xx answer (the caller's error) or an untrusted certificate is raised at once.  Each
instance has its own ``glidein_ext.throttle.Throttle``: after failures the client spaces its
calls to it, and recovers its pace with each success (Lee 2003 4.3).
"""

from __future__ import annotations

import functools
import http.client
import json
import logging
import os
import random
import socket
import ssl
import stat
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from glidein_ext.errors import (
    TaskQueueAuthError,
    TaskQueueError,
    TaskQueueTlsError,
    UsageError,
    tq_error_for_status,
)
from glidein_ext.throttle import Throttle
from glidein_ext.tq.client.connections import REUSE_WITHIN, Connections, proxied
from glidein_ext.tq.client.credentials import CredentialInfo, IssuedCredential
from glidein_ext.tq.client.endpoints import EndpointSet, parse_endpoints
from glidein_ext.tq.client.protocol import (
    API,
    Claim,
    ClaimAnswer,
    CompleteAndRequest,
    CompleteAndRequestAnswer,
    Completion,
    CompletionAnswer,
    Heartbeat,
    HeartbeatAnswer,
    PilotReport,
    RegisterAnswer,
    Registration,
    ReportOutcome,
    Reports,
    ReportsAnswer,
    SiteAssign,
    SiteAssignAnswer,
    SiteSync,
    SiteSyncAnswer,
    Status,
    SubmitAnswer,
    TaskAssignment,
    TaskRequest,
    parse,
    parse_assignment,
    to_json,
)

T = TypeVar("T")
log = logging.getLogger("glidein_ext.tq.client.client")
MAX_TOKEN_FILE = 4096  # bytes: a token file is one line


def tls_context(ca_file: str | None = None) -> ssl.SSLContext:
    """A client context that verifies the server against ``ca_file`` (PEM), else the system's CA
    store, with its host name checked; TLS 1.2 at least.  UsageError if the file is unusable."""
    try:
        context = ssl.create_default_context(cafile=ca_file or None)
    except (OSError, ssl.SSLError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise UsageError(f"cannot use the CA file {ca_file}: {reason}") from None
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


def read_token_file(path: str) -> str:
    """The token in ``path``: one line, from a regular file of ours (not a symlink) that neither
    group nor others may read or write (like an ssh key); UsageError, one line, otherwise.  The
    one rule for every pilot's token file (``pilot run``, a glidein's agent): a file others
    could read is refused, never made private after the fact."""
    try:
        # O_NONBLOCK: a FIFO in its place does not hang the pilot (it is no regular file)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    except OSError as exc:
        raise UsageError(f"cannot read the token file {path}: {exc.strerror}") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise UsageError(f"the token file {path} is not a regular file")
    if info.st_uid != os.geteuid():
        os.close(fd)
        raise UsageError(f"the token file {path} is not ours (uid {info.st_uid})")
    with os.fdopen(fd, "rb") as handle:
        if info.st_mode & 0o077:
            mode = stat.S_IMODE(info.st_mode)
            raise UsageError(
                f"the token file {path} is open to group or others (mode {mode:04o}): "
                "it must be private (chmod 600)"
            )
        raw = handle.read(MAX_TOKEN_FILE + 1)
    lines = raw.decode("utf-8", "replace").strip().splitlines()
    if len(raw) > MAX_TOKEN_FILE or len(lines) != 1 or not lines[0].strip():
        raise UsageError(f"the token file {path} must hold one token on one line")
    return lines[0].strip()


class _Unavailable(Exception):
    """One instance did not serve a call (no connection, timeout, 5xx): try the next one.
    ``undone``: the instance surely did nothing (no connection, or it answered that it failed),
    so even a call that must not be repeated may go to another instance."""

    def __init__(self, error: TaskQueueError, undone: bool = False) -> None:
        super().__init__(str(error))
        self.error = error
        self.undone = undone


class TqClient:
    """Calls of the pilot protocol and of operators, each one HTTP request to one instance.

    ``url``: one URL, a comma-separated list, or a sequence of them (failover, see the module).
    ``ca_file``: the CA (PEM) an ``https://`` Task Queue's certificate must chain to; None: the
    system's CA store.  Given with only ``http://`` URLs it is refused (the call would not use
    it).  ``throttle``: False turns the per-instance throttles off; ``reuse_within``: seconds
    since its last answer a connection is reused (``tq.client.connections``; 0: a new connection
    for every call); ``clock``, ``sleep`` and ``rng`` are for tests."""

    def __init__(
        self,
        url: str | Sequence[str],
        token: str,
        timeout: float = 30.0,
        ca_file: str | None = None,
        *,
        throttle: bool = True,
        reuse_within: float = REUSE_WITHIN,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
    ) -> None:
        try:
            urls = parse_endpoints(url)
        except UsageError as exc:
            raise TaskQueueError(str(exc)) from None
        self.endpoints = EndpointSet(urls, rng=rng)
        self.url = urls[0]  # the instance that answered last (for messages)
        self.token = token
        self.timeout = timeout
        self.ca_file = ca_file or None
        self.clock = clock
        self.sleep = sleep
        self.throttles = {u: Throttle(limit_healthy=False) for u in urls} if throttle else {}
        self._state = threading.Lock()  # over endpoints and throttles, never over a call
        self.context: ssl.SSLContext | None = None
        if any(u.startswith("https://") for u in urls):
            self.context = tls_context(self.ca_file)
        elif self.ca_file:
            raise UsageError(f"a CA file is given but the Task Queue URL is not https://: {url}")
        self.connections = Connections(self.context, reuse_within, clock)
        self._proxied = {u: proxied(u) for u in urls}  # through a proxy: urllib, a new connection
        self._aborts = 0  # abort_waiting calls so far

    @property
    def urls(self) -> list[str]:
        return list(self.endpoints.urls)

    def abort_waiting(self) -> int:
        """End the standing offers (``request`` with ``wait``) under way, from any thread: each
        raises TaskQueueError at once instead of standing out its wait (a pilot that stops).
        A request through a proxy (urllib) stands out its wait.  How many were cut."""
        with self._state:
            self._aborts += 1
        return self.connections.abort_waiting()

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        timeout: float | None = None,
        repeatable: bool = True,
        abortable: bool = False,
    ) -> Any:
        """One call, failed over across the instances (each tried at most once); the last
        instance's error if none served it.  ``repeatable=False`` (a workflow's submit, minting
        credentials: done twice they would exist twice): failed over only when the request
        never reached the instance, or it answered 5xx (it failed: nothing was done).
        ``abortable``: :meth:`abort_waiting` may cut it short; it is then not failed over."""
        data = None if body is None else json.dumps(body).encode()
        failure: TaskQueueError | None = None
        with self._state:  # the agent's threads share one client
            order = self.endpoints.order(self.clock())
            aborts = self._aborts
        for url in order:
            throttle = self.throttles.get(url)
            if throttle is not None:
                with self._state:
                    wait = throttle.delay(self.clock())
                    throttle.take(self.clock() + wait)
                if wait > 0:
                    self.sleep(wait)
            try:
                answer = self._call_one(url, method, path, data, timeout or self.timeout, abortable)
            except _Unavailable as exc:
                if not repeatable and not exc.undone:
                    raise exc.error from None  # it may have been done: not again elsewhere
                if abortable and self._aborts != aborts:
                    raise exc.error from None  # cut short on purpose: no instance failed
                with self._state:
                    now = self.clock()
                    backoff = self.endpoints.failed(url, now)
                    if throttle is not None:
                        throttle.failed(now)
                if len(self.endpoints.urls) > 1:
                    log.info("%s; failing over (it rests %.1f s)", exc.error, backoff)
                failure = exc.error
                continue
            with self._state:
                self.endpoints.succeeded(url)
                if throttle is not None:
                    throttle.succeeded()
            self.url = url
            return answer
        assert failure is not None
        if len(self.endpoints.urls) > 1:
            count = len(self.endpoints.urls)
            raise TaskQueueError(f"none of the {count} Task Queue instances answered: {failure}")
        raise failure

    def _call_one(
        self,
        base: str,
        method: str,
        path: str,
        data: bytes | None,
        timeout: float,
        abortable: bool = False,
    ) -> Any:
        headers = {
            "Authorization": f"Bearer {self.token}",
            "Content-Type": "application/json",
            "Accept": "application/json",
        }
        try:
            if not self._proxied.get(base, True):  # a kept-alive connection, errors as urllib's
                raw = self.connections.exchange(
                    base, method, path, data, headers, timeout, abortable
                )
            else:
                request = urllib.request.Request(  # noqa: S310 (scheme checked in __init__)
                    f"{base}{path}", data=data, method=method, headers=headers
                )
                with urllib.request.urlopen(  # noqa: S310
                    request, timeout=timeout, context=self.context
                ) as answer:
                    raw = answer.read()
        except urllib.error.HTTPError as exc:
            error = _status_error(base, path, exc.code, _detail(exc))
            if exc.code >= 500 or exc.code == 429:  # the instance's trouble: fail over
                raise _Unavailable(error, undone=True) from None  # it answered: nothing done
            raise error from None
        except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
            # HTTPException: a malformed port (InvalidURL), a cut answer (IncompleteRead)
            reason = getattr(exc, "reason", exc)
            if isinstance(reason, ssl.SSLCertVerificationError):
                trusted = self.ca_file or "the system's CA store"
                raise TaskQueueTlsError(
                    f"the Task Queue at {base} is not trusted (CA: {trusted}): "
                    f"{reason.verify_message or reason.reason}{_tls_hint(reason)}"
                ) from None
            error = TaskQueueError(
                f"cannot reach the Task Queue at {base}: {reason}{_hint(base, reason)}"
            )
            # no connection, or no such host: the request never left
            undone = isinstance(reason, (ConnectionRefusedError, socket.gaierror))
            raise _Unavailable(error, undone=undone) from None
        except ValueError as exc:  # a malformed URL or token
            raise TaskQueueError(f"cannot call the Task Queue at {base!r}: {exc}") from None
        try:
            return json.loads(raw or b"null")
        except ValueError as exc:
            raise TaskQueueError(f"{base}{path}: answer is not JSON: {exc}") from None

    # --- pilots ---

    def register(self, registration: Registration) -> RegisterAnswer:
        return self._post(f"{API}/pilots", to_json(registration), RegisterAnswer)

    def request(
        self, pilot_id: int, cached: Sequence[str] | None = None, wait: float = 0.0
    ) -> TaskAssignment | None:
        """Hasham 2011 §IV-E: the pilot's next task, None when nothing fits now.  ``wait`` > 0:
        nothing fits, the pilot leaves a standing offer for that many seconds (Lee 2003 4.2.3, the
        courier): an urgent task submitted meanwhile is pushed to it
        (``tq.service.pool.courier``)."""
        path = f"{API}/pilots/{pilot_id}/request"
        body = to_json(TaskRequest(_listed(cached), wait))
        if wait > 0:  # the HTTP timeout covers the offer's wait; abort_waiting may cut it
            answer = self.call("POST", path, body, timeout=self.timeout + wait, abortable=True)
        else:
            answer = self.call("POST", path, body)
        return self._parsed(path, parse_assignment, answer)

    def heartbeat(self, pilot_id: int, cached: Sequence[str] | None = None) -> HeartbeatAnswer:
        path = f"{API}/pilots/{pilot_id}/heartbeat"
        return self._post(path, to_json(Heartbeat(_listed(cached))), HeartbeatAnswer)

    def complete(self, pilot_id: int, completion: Completion) -> CompletionAnswer:
        path = f"{API}/pilots/{pilot_id}/complete"
        return self._post(path, to_json(completion), CompletionAnswer)

    def complete_and_request(
        self, pilot_id: int, completion: Completion, cached: Sequence[str] | None = None
    ) -> CompleteAndRequestAnswer:
        """``complete``, then ``request`` (never a standing offer) in one call and one
        transaction: a busy pilot's one call per task, to a Task Queue whose registration answer
        says it takes it (``RegisterAnswer.complete_and_request``).  Repeatable as both are: a
        repeated completion is answered ``duplicate``, a repeated request returns the task the
        pilot already holds."""
        path = f"{API}/pilots/{pilot_id}/complete-and-request"
        body = to_json(CompleteAndRequest(completion, _listed(cached)))
        return self._post(path, body, CompleteAndRequestAnswer)

    def reports(
        self, reports: Sequence[PilotReport]
    ) -> list[CompleteAndRequestAnswer | TaskQueueError]:
        """Several pilots' ``complete_and_request`` in one request, to a Task Queue whose
        registration answer says it takes them (``RegisterAnswer.batched_reports``): each
        report's answer, or in its place the error the call alone would raise (by its status,
        as ``call`` raises them; 5xx a TaskQueueError, which a pilot retries).  Repeatable as
        each call is.  The request's own failure (no instance answered) is raised."""
        path = f"{API}/pilots/reports"
        answer = self._post(path, to_json(Reports(tuple(reports))), ReportsAnswer)
        if len(answer.outcomes) != len(reports):
            raise TaskQueueError(
                f"{self.url}{path}: malformed answer: {len(answer.outcomes)} outcomes "
                f"for {len(reports)} reports"
            )
        return [self._outcome(path, outcome) for outcome in answer.outcomes]

    def _outcome(
        self, path: str, outcome: ReportOutcome
    ) -> CompleteAndRequestAnswer | TaskQueueError:
        if outcome.status == 200:
            if outcome.answer is None:
                return TaskQueueError(
                    f"{self.url}{path}: malformed answer: an outcome without answer"
                )
            return outcome.answer
        return _status_error(self.url, path, outcome.status, outcome.detail)

    def deregister(self, pilot_id: int) -> None:
        self.call("DELETE", f"{API}/pilots/{pilot_id}")

    # --- a distributed site's master (Delgado Peris 2014 §III.B) ---

    def claim_master(self, site: str, claim: Claim) -> ClaimAnswer:
        return self._post(f"{API}/sites/{_quoted(site)}/master", to_json(claim), ClaimAnswer)

    def sync(self, site: str, call: SiteSync) -> SiteSyncAnswer:
        """Completions, dead workers, undelivered tasks; the runnable tasks wanted (``wait``:
        held until some are, at most that many seconds)."""
        path = f"{API}/sites/{_quoted(site)}/sync"
        timeout = self.timeout + call.wait  # the HTTP timeout covers the long poll
        answer = self.call("POST", path, to_json(call), timeout=timeout)
        return self._parsed(path, functools.partial(parse, SiteSyncAnswer), answer)

    def assign(self, site: str, call: SiteAssign) -> SiteAssignAnswer:
        return self._post(f"{API}/sites/{_quoted(site)}/assign", to_json(call), SiteAssignAnswer)

    # --- operators ---

    def submit(self, workflow: Mapping[str, Any]) -> SubmitAnswer:
        """Submit a workflow (the JSON form of a workflow file)."""
        path = f"{API}/workflows"
        answer = self.call("POST", path, workflow, repeatable=False)
        return self._parsed(path, functools.partial(parse, SubmitAnswer), answer)

    def status(self) -> Status:
        path = f"{API}/status"
        return self._parsed(path, functools.partial(parse, Status), self.call("GET", path))

    # --- operators: per-pilot credentials (tq.client.credentials) ---

    def mint_credentials(
        self, site: str, count: int = 1, ttl: int | None = None, note: str = ""
    ) -> list[IssuedCredential]:
        """New credentials of ``site``; their secrets are in this answer only."""
        path = f"{API}/credentials"
        body = {"site": site, "count": count, "ttl": ttl, "note": note}
        read = functools.partial(_listed_messages, IssuedCredential)
        return self._parsed(path, read, self.call("POST", path, body, repeatable=False))

    def credentials(self) -> list[CredentialInfo]:
        path = f"{API}/credentials"
        read = functools.partial(_listed_messages, CredentialInfo)
        return self._parsed(path, read, self.call("GET", path))

    def revoke_credential(self, credential_id: int) -> tuple[int, ...]:
        """Revoke a credential; the pilots it ended."""
        path = f"{API}/credentials/{credential_id}"
        answer = self.call("DELETE", path)
        return self._parsed(path, _ended_pilots, answer)

    # --- answers ---

    def _post(self, path: str, body: Any, kind: type[T]) -> T:
        return self._parsed(path, functools.partial(parse, kind), self.call("POST", path, body))

    def _parsed(self, path: str, read: Callable[[Any], T], answer: Any) -> T:
        try:
            return read(answer)
        except ValueError as exc:
            raise TaskQueueError(f"{self.url}{path}: malformed answer: {exc}") from None


def _listed_messages(kind: type[T], answer: Any) -> list[T]:
    items = answer.get("credentials") if isinstance(answer, dict) else None
    if not isinstance(items, list):
        raise ValueError("missing list 'credentials'")
    return [parse(kind, item) for item in items]


def _ended_pilots(answer: Any) -> tuple[int, ...]:
    pilots = answer.get("pilots") if isinstance(answer, dict) else None
    if not isinstance(pilots, list) or not all(type(p) is int for p in pilots):
        raise ValueError("missing list of integers 'pilots'")
    return tuple(pilots)


# OpenSSL's X509_V_ERR_HOSTNAME_MISMATCH and X509_V_ERR_IP_ADDRESS_MISMATCH
_NAME_MISMATCH = (62, 64)


def _tls_hint(error: ssl.SSLCertVerificationError) -> str:
    """Why a certificate that chains to the CA is still refused: its names."""
    if error.verify_code in _NAME_MISMATCH:
        return (
            " (the certificate must name this host or address in its subjectAltName: a "
            "Common Name alone is not used; see docs/tq.md, TLS)"
        )
    return ""


def _hint(base: str, reason: object) -> str:
    """What an operator may have got wrong when a connection is closed without an answer."""
    closed = isinstance(reason, (http.client.RemoteDisconnected, ConnectionResetError))
    if closed and base.startswith("http://"):
        https = "https://" + base[len("http://") :]
        return f" (a Task Queue serving TLS closes plain HTTP connections: is it {https}?)"
    return ""


def _quoted(site: str) -> str:
    return urllib.parse.quote(site, safe="")


def _listed(cached: Sequence[str] | None) -> tuple[str, ...] | None:
    return None if cached is None else tuple(cached)


def _status_error(base: str, path: str, status: int, detail: str) -> TaskQueueError:
    """The error for a call to ``base + path`` answered ``status`` with ``detail``: its kind
    from ``TQ_HTTP_STATUS`` (an auth error names the instance that refused the token), else a
    TaskQueueError naming the call and its status."""
    kind = tq_error_for_status(status)
    if kind is None:
        return TaskQueueError(f"{base}{path}: HTTP {status}: {detail}")
    return kind(f"{base}: {detail}" if issubclass(kind, TaskQueueAuthError) else detail)


def _detail(exc: urllib.error.HTTPError) -> str:
    try:
        body = json.loads(exc.read() or b"{}")
    except (ValueError, OSError):
        return exc.reason if isinstance(exc.reason, str) else f"HTTP {exc.code}"
    detail = body.get("detail") if isinstance(body, dict) else None
    if isinstance(detail, list):  # FastAPI's validation errors
        first = detail[0] if detail else {}
        where = ".".join(str(p) for p in first.get("loc", ()))
        return f"{where}: {first.get('msg', 'invalid')}"
    return str(detail) if detail else f"HTTP {exc.code}"
