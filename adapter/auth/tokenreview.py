"""Bearer tokens, checked by TokenReview against the cluster (toolkit/tokenreview.py: cached briefly, yes and no, keyed
by a hash of the token, concurrent requests sharing one review), as the adapter's authenticators see them: a
`UserInfo`, and `AuthenticationUnavailableError` when the review cannot be made."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from kubernetes.client import ApiClient

from adapter.auth.identity import AuthenticationUnavailableError, UserInfo
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
    ) -> None:
        self._reviewer = ClusterTokenReviewer(
            api_client,
            audiences=audiences,
            ttl=ttl,
            max_entries=max_entries,
            request_timeout=request_timeout,
            clock=clock,
        )

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
            raise AuthenticationUnavailableError(str(e)) from e
        if user is None:
            return None
        return UserInfo(name=user.name, uid=user.uid, groups=user.groups, extra=user.extra)
