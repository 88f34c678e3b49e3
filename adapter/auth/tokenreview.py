"""Bearer tokens, checked by TokenReview against the cluster (toolkit/tokenreview.py: cached briefly, yes and no, keyed
by a hash of the token, concurrent requests sharing one review), as the adapter's authenticators see them: a
`UserInfo`, and `AuthenticationUnavailableError` when the review cannot be made (counted, adapter/auth/selfmetrics.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from kubernetes.client import ApiClient
from prometheus_client import CollectorRegistry

from adapter.auth.identity import AuthenticationUnavailableError, UserInfo
from adapter.auth.selfmetrics import token_review_collector
from toolkit.tokenreview import TokenReviewer as ClusterTokenReviewer
from toolkit.tokenreview import TokenReviewUnavailableError


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
        registry: CollectorRegistry | None = None,
    ) -> None:
        self.failures = 0  # reviews that could not be made: each request's credentials went unchecked (401)
        self._reviewer = ClusterTokenReviewer(
            api_client,
            audiences=audiences,
            ttl=ttl,
            max_entries=max_entries,
            request_timeout=request_timeout,
            clock=clock,
        )
        if registry is not None:
            registry.register(token_review_collector(self))

    @property
    def reviews(self) -> int:
        """TokenReviews sent."""
        return self._reviewer.reviews

    async def review(self, token: str) -> UserInfo | None:
        """The token's user, or None when the cluster rejects it (or it is no well-formed token). Raises
        AuthenticationUnavailableError."""
        try:
            user = await self._reviewer.review(token)
        except TokenReviewUnavailableError as e:
            self.failures += 1
            raise AuthenticationUnavailableError(str(e)) from e
        if user is None:
            return None
        return UserInfo(name=user.name, uid=user.uid, groups=user.groups, extra=user.extra)
