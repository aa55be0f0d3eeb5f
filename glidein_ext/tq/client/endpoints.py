"""A client's set of Task Queue endpoints, pure: load spread and failover (Lee 2003 4.1).

Lee 2003 makes its brokers equal ("Clients can submit job through any of the JobSubmissionFactory
services"), with no single point of failure.  A client is given every instance's URL (``--tq URL``
repeated, or comma-separated); ``EndpointSet`` says in which order to try them for one call:

- the instances in round-robin from a random start (clients spread their load; a client with one
  URL behaves as before);
- an instance that failed (no connection, a timeout, 5xx) is backed off (``glidein_ext.backoff``:
  jittered, exponential) and tried after every healthy one, the one that comes back soonest first;
- a success forgets its failures.

Errors that are the caller's (4xx) say nothing about the instance and are not failed over.  Time
is passed in (fake clocks in the unit tests).  Python 3.9, standard library only (pilots use it).
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence

from glidein_ext.backoff import Backoff
from glidein_ext.errors import UsageError


def parse_endpoints(urls: str | Iterable[str]) -> list[str]:
    """The URLs in ``urls`` (one string, comma-separated, or several such strings), without a
    trailing slash, duplicates dropped in order; UsageError if none or one is not http(s)."""
    items = [urls] if isinstance(urls, str) else list(urls)
    found: list[str] = []
    for item in items:
        for part in item.split(","):
            url = part.strip().rstrip("/")
            if not url:
                continue
            if not url.startswith(("http://", "https://")):
                raise UsageError(f"a Task Queue URL must be http:// or https://, got {url!r}")
            rest = url.split("://", 1)[1]
            if "/" in rest or "?" in rest or "#" in rest:  # the API's paths are added to it
                where = rest.split("/", 1)[0].split("?", 1)[0].split("#", 1)[0]
                scheme = url.split("://", 1)[0]
                raise UsageError(
                    f"a Task Queue URL is scheme://host:port without a path, got {url!r} "
                    f"(give {scheme}://{where})"
                )
            if url not in found:
                found.append(url)
    if not found:
        raise UsageError("no Task Queue URL given")
    return found


class EndpointSet:
    """The order to try a client's endpoints in, call after call."""

    def __init__(
        self,
        urls: Sequence[str],
        rng: random.Random | None = None,
        backoff: Backoff | None = None,
    ) -> None:
        if not urls:
            raise UsageError("no Task Queue URL given")
        self.urls = list(urls)
        self.rng = rng or random.Random()
        self.backoff = backoff or Backoff(rng=self.rng)
        self._cursor = self.rng.randrange(len(self.urls))  # clients start spread out

    def order(self, now: float) -> list[str]:
        """Every endpoint once, for one call: healthy ones round-robin, then the backed-off ones
        (soonest back first).  Each call moves the round-robin on by one."""
        n = len(self.urls)
        rotated = [self.urls[(self._cursor + i) % n] for i in range(n)]
        self._cursor = (self._cursor + 1) % n
        healthy = [u for u in rotated if self.backoff.ready(u, now)]
        resting = sorted(
            (u for u in rotated if not self.backoff.ready(u, now)),
            key=lambda u: self.backoff.remaining(u, now),
        )
        return healthy + resting

    def succeeded(self, url: str) -> None:
        self.backoff.succeeded(url)

    def failed(self, url: str, now: float) -> float:
        """``url`` failed (unreachable, timeout, 5xx); the seconds it is backed off."""
        return self.backoff.failed(url, now)

    def healthy(self, now: float) -> list[str]:
        return [u for u in self.urls if self.backoff.ready(u, now)]
