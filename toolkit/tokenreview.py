"""Bearer tokens checked by TokenReview against the cluster (authentication.k8s.io/v1), with the answers (yes and no)
cached briefly: the adapter's delegated authentication, and the exporter's check of the adapter's token.

The cache is keyed by a hash of the token (tokens themselves are not kept), bounded, and shared by concurrent
requests: many requests with one new token make one TokenReview, not one each. A review that cannot be made (the API
server unreachable) is not cached and raises `TokenReviewUnavailableError`; each caller decides what that means.

With `audiences`, the token must be bound to one of them (a projected service account token made for this audience):
a token for the API server, or for anything else, is refused.

Reviews of tokens nobody presented before are bounded in rate (`new_per_second`, with a burst of `new_burst`): each
new random token was a call to the API server, 2,000 in 5 s, which a flood turns into the API server's load. Past the
bound a new token is refused without a review (`TokenReviewRateLimitedError`, a TokenReviewUnavailableError, so both
services answer 401); a token the cluster accepted within `known_for` seconds (the adapter's, the HPA's) is reviewed
again whatever the flood, and what is cached answers as before.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from toolkit.ttlcache import CoalescingCache, ExpiringCache


class TokenReviewUnavailableError(Exception):
    """The TokenReview could not be made; the message is one line."""


class TokenReviewRateLimitedError(TokenReviewUnavailableError):
    """A token nobody presented before, past the bound on the rate of such reviews: refused without a review."""


NEW_PER_SECOND = 10.0
NEW_BURST = 50
KNOWN_FOR = 600.0


class ReviewBudget:
    """A token bucket: `burst` reviews at once, refilled at `per_second` on `clock`."""

    def __init__(self, per_second: float, burst: int, clock: Callable[[], float]) -> None:
        if per_second <= 0 or burst < 1:
            raise ValueError("per_second and burst must be positive")
        self._per_second, self._burst, self._clock = per_second, float(burst), clock
        self._left, self._at = float(burst), clock()

    def take(self) -> bool:
        now = self._clock()
        self._left = min(self._burst, self._left + (now - self._at) * self._per_second)
        self._at = now
        if self._left < 1:
            return False
        self._left -= 1
        return True


@dataclass(frozen=True, slots=True)
class ReviewedUser:
    name: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


_REJECTED = ReviewedUser(name="")  # the cached "no"


def token_is_wellformed(token: str) -> bool:
    """Whether `token` can be a bearer token at all: visible ASCII (RFC 6750's b64token and every JWT are), so that a
    header aiohttp decoded with surrogates (`Bearer \\xe9`) is a refused token, not an error."""
    return bool(token) and token.isascii() and token.isprintable() and " " not in token


class TokenReviewer:
    def __init__(
        self,
        api_client: Any,
        *,
        audiences: Sequence[str] = (),
        ttl: float = 10.0,
        rejected_ttl: float | None = None,
        max_entries: int = 4096,
        request_timeout: float = 5.0,
        new_per_second: float = NEW_PER_SECOND,
        new_burst: int = NEW_BURST,
        known_for: float = KNOWN_FOR,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        from kubernetes.client import AuthenticationV1Api

        self._api = AuthenticationV1Api(api_client)
        self._audiences = list(audiences)
        self._ttl = ttl
        self._rejected_ttl = ttl if rejected_ttl is None else rejected_ttl
        self._timeout = request_timeout
        self._cache: CoalescingCache[bytes, ReviewedUser] = CoalescingCache(max_entries, clock)
        self._budget = ReviewBudget(new_per_second, new_burst, clock)
        self._known: ExpiringCache[bytes, bool] = ExpiringCache(max_entries, clock)  # accepted lately: never limited
        self._known_for = known_for
        self._new_per_second = new_per_second
        self.reviews = 0  # TokenReviews sent
        self.rate_limited = 0  # new tokens refused without a review, past the bound

    async def review(self, token: str) -> ReviewedUser | None:
        """The token's user, or None when the cluster rejects it (or it is not a well-formed token: no review is
        made). Raises TokenReviewUnavailableError."""
        if not token_is_wellformed(token):
            return None
        key = hashlib.sha256(token.encode()).digest()
        found = await self._cache.get(
            key,
            lambda: self._bounded_review(key, token),
            lambda user: self._rejected_ttl if user is _REJECTED else self._ttl,
        )
        return None if found is _REJECTED else found

    async def _bounded_review(self, key: bytes, token: str) -> ReviewedUser:
        if self._known.get(key) is None and not self._budget.take():
            self.rate_limited += 1
            raise TokenReviewRateLimitedError(
                f"more than {self._new_per_second:g} new bearer tokens a second: refused without a TokenReview"
            )
        user = await asyncio.to_thread(self._review, token)
        if user is not _REJECTED:
            self._known.put(key, True, self._known_for)
        return user

    def _review(self, token: str) -> ReviewedUser:
        from kubernetes.client import V1TokenReview, V1TokenReviewSpec
        from kubernetes.client.exceptions import ApiException

        self.reviews += 1
        body = V1TokenReview(
            api_version="authentication.k8s.io/v1",
            kind="TokenReview",
            spec=V1TokenReviewSpec(token=token, audiences=self._audiences or None),
        )
        try:
            answer = self._api.create_token_review(body, _request_timeout=self._timeout)
        except ApiException as e:
            raise TokenReviewUnavailableError(f"TokenReview failed: HTTP {e.status} {e.reason or ''}".strip()) from e
        except Exception as e:
            raise TokenReviewUnavailableError(f"TokenReview failed: {type(e).__name__}") from e
        status = answer.status
        if status is None or not status.authenticated or status.user is None or not status.user.username:
            return _REJECTED
        if self._audiences and not set(self._audiences) & set(status.audiences or ()):
            return _REJECTED
        user = status.user
        extra = {k: tuple(v) for k, v in (user.extra or {}).items()}
        return ReviewedUser(name=user.username or "", uid=user.uid or "", groups=tuple(user.groups or ()), extra=extra)
