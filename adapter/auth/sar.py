"""Authorization by SubjectAccessReview, with allow and deny answers cached briefly and bounded."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from kubernetes.client import (
    ApiClient,
    AuthorizationV1Api,
    V1NonResourceAttributes,
    V1ResourceAttributes,
    V1SubjectAccessReview,
    V1SubjectAccessReviewSpec,
)
from kubernetes.client.exceptions import ApiException

from adapter.auth.identity import (
    AuthorizationUnavailableError,
    Decision,
    RequestAttributes,
    ResourceAttributes,
    UserInfo,
)
from adapter.auth.ttlcache import CoalescingCache

# how long a decision is kept fresh after the last request that needed it
KEEP_FRESH_SECONDS = 60.0
# a decision kept fresh is reviewed again in the last quarter of its life (2.5 s of 10): sweeps come at most a second
# apart while requests come, so it is renewed in time, about once per life and not twice (each review costs the
# kube-apiserver a request and this process the `kubernetes` client's work in a thread, which competes with the
# event loop for the interpreter)
REFRESH_AHEAD = 0.25


class SubjectAccessReviewer:
    def __init__(
        self,
        api_client: ApiClient,
        *,
        allow_ttl: float = 10.0,
        deny_ttl: float = 10.0,
        max_entries: int = 4096,
        request_timeout: float = 5.0,
        keep_fresh: float = KEEP_FRESH_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._api = AuthorizationV1Api(api_client)
        self._allow_ttl = allow_ttl
        self._deny_ttl = deny_ttl
        self._timeout = request_timeout
        self._clock = clock
        self._cache: CoalescingCache[tuple[object, ...], Decision] = CoalescingCache(
            max_entries, clock, refresh_ahead=REFRESH_AHEAD, keep_fresh=keep_fresh
        )
        self._swept_at = -float("inf")
        self.reviews = 0  # SubjectAccessReviews sent

    async def authorize(self, user: UserInfo, attributes: RequestAttributes) -> Decision:
        """Allowed or not (with the reason). Raises AuthorizationUnavailableError when the review fails.

        Decisions asked for within `keep_fresh` seconds are reviewed again before they expire, in the background, as
        requests come (at most one sweep a second): a client asking steadily (the HPA controller, for each namespace
        every 15 s, against the 10 s life of a decision) never waits for a review, and no decision is older than its
        life, as kube-apiserver's webhook authorizer caches them.
        """
        now = self._clock()
        if now - self._swept_at >= 1.0:
            self._swept_at = now
            self._cache.refresh_due()
        return await self._cache.get(
            (user.cache_key(), attributes),
            lambda: asyncio.to_thread(self._review, user, attributes),
            lambda decision: self._allow_ttl if decision.allowed else self._deny_ttl,
        )

    def _review(self, user: UserInfo, attributes: RequestAttributes) -> Decision:
        self.reviews += 1
        spec = V1SubjectAccessReviewSpec(
            user=user.name,
            uid=user.uid or None,
            groups=list(user.groups) or None,
            extra={k: list(v) for k, v in user.extra.items()} or None,
        )
        if isinstance(attributes, ResourceAttributes):
            spec.resource_attributes = V1ResourceAttributes(
                verb=attributes.verb,
                group=attributes.group,
                version=attributes.version or None,
                resource=attributes.resource,
                subresource=attributes.subresource or None,
                namespace=attributes.namespace or None,
                name=attributes.name or None,
            )
        else:
            spec.non_resource_attributes = V1NonResourceAttributes(path=attributes.path, verb=attributes.verb)
        body = V1SubjectAccessReview(api_version="authorization.k8s.io/v1", kind="SubjectAccessReview", spec=spec)
        try:
            answer = self._api.create_subject_access_review(body, _request_timeout=self._timeout)
        except ApiException as e:
            message = f"SubjectAccessReview failed: HTTP {e.status} {e.reason or ''}".strip()
            raise AuthorizationUnavailableError(message) from e
        except Exception as e:
            raise AuthorizationUnavailableError(f"SubjectAccessReview failed: {type(e).__name__}") from e
        status = answer.status
        if status is None:
            return Decision(False, "the SubjectAccessReview came back without a status")
        allowed = bool(status.allowed) and not status.denied
        return Decision(allowed, status.reason or status.evaluation_error or "")
