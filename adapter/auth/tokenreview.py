"""Bearer tokens, checked by TokenReview against the cluster, with the answers (yes and no) cached briefly.

The cache is keyed by a hash of the token (tokens themselves are not kept), bounded, and shared by concurrent
requests: many requests with one new token make one TokenReview, not one each.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Callable, Sequence

from kubernetes.client import ApiClient, AuthenticationV1Api, V1TokenReview, V1TokenReviewSpec
from kubernetes.client.exceptions import ApiException

from adapter.auth.identity import AuthenticationUnavailableError, UserInfo
from adapter.auth.ttlcache import CoalescingCache

_REJECTED = UserInfo(name="")  # the cached "no"


class TokenReviewer:
    def __init__(
        self,
        api_client: ApiClient,
        *,
        audiences: Sequence[str] = (),
        ttl: float = 10.0,
        max_entries: int = 4096,
        request_timeout: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._api = AuthenticationV1Api(api_client)
        self._audiences = list(audiences)
        self._ttl = ttl
        self._timeout = request_timeout
        self._cache: CoalescingCache[bytes, UserInfo] = CoalescingCache(max_entries, clock)
        self.reviews = 0  # TokenReviews sent

    async def review(self, token: str) -> UserInfo | None:
        """The token's user, or None when the cluster rejects it. Raises AuthenticationUnavailableError."""
        key = hashlib.sha256(token.encode()).digest()
        found = await self._cache.get(key, lambda: asyncio.to_thread(self._review, token), lambda _: self._ttl)
        return None if found is _REJECTED else found

    def _review(self, token: str) -> UserInfo:
        self.reviews += 1
        body = V1TokenReview(
            api_version="authentication.k8s.io/v1",
            kind="TokenReview",
            spec=V1TokenReviewSpec(token=token, audiences=self._audiences or None),
        )
        try:
            answer = self._api.create_token_review(body, _request_timeout=self._timeout)
        except ApiException as e:
            raise AuthenticationUnavailableError(f"TokenReview failed: HTTP {e.status} {e.reason or ''}".strip()) from e
        except Exception as e:
            raise AuthenticationUnavailableError(f"TokenReview failed: {type(e).__name__}") from e
        status = answer.status
        if status is None or not status.authenticated or status.user is None or not status.user.username:
            return _REJECTED
        if self._audiences and not set(self._audiences) & set(status.audiences or ()):
            return _REJECTED
        user = status.user
        extra = {k: tuple(v) for k, v in (user.extra or {}).items()}
        return UserInfo(name=user.username or "", uid=user.uid or "", groups=tuple(user.groups or ()), extra=extra)
