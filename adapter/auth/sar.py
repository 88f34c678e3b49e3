"""Authorization by SubjectAccessReview, with allow and deny answers cached briefly and bounded.

Reviews are made on the event loop (toolkit/kuberest.py), not through the `kubernetes` client in a worker thread: at
fleet size a replica reviews a decision per namespace every 8 s, and a thread's work took the interpreter from the
loop in slices of up to 5 ms (the switch interval), which small answers waited behind.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from kubernetes.client import ApiClient

from adapter.auth.identity import (
    AuthorizationUnavailableError,
    Decision,
    RequestAttributes,
    ResourceAttributes,
    UserInfo,
)
from toolkit.kuberest import KubeRequestError, KubeRequests
from toolkit.ttlcache import CoalescingCache

# how long a decision is kept fresh after the last request that needed it
KEEP_FRESH_SECONDS = 60.0
# a decision kept fresh is reviewed again in the last quarter of its life (2.5 s of 10): sweeps come at most a second
# apart while requests come, so it is renewed in time, about once per life and not twice (each review costs the
# kube-apiserver a request)
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
        self._api = KubeRequests(api_client.configuration)
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
            lambda: self._review(user, attributes),
            lambda decision: self._allow_ttl if decision.allowed else self._deny_ttl,
        )

    async def close(self) -> None:
        await self._api.close()

    async def _review(self, user: UserInfo, attributes: RequestAttributes) -> Decision:
        self.reviews += 1
        try:
            answer = await self._api.post(REVIEWS_PATH, review_body(user, attributes), timeout=self._timeout)
        except KubeRequestError as e:
            raise AuthorizationUnavailableError(f"SubjectAccessReview failed: {e}") from e
        return decision_of(answer)


REVIEWS_PATH = "/apis/authorization.k8s.io/v1/subjectaccessreviews"


def review_body(user: UserInfo, attributes: RequestAttributes) -> dict[str, object]:
    """The SubjectAccessReview (authorization.k8s.io/v1) asking whether `user` may do what `attributes` say; empty
    fields are left out, as the Go types' omitempty writes them."""
    spec: dict[str, object] = {"user": user.name}
    if user.uid:
        spec["uid"] = user.uid
    if user.groups:
        spec["groups"] = list(user.groups)
    if user.extra:
        spec["extra"] = {key: list(values) for key, values in user.extra.items()}
    if isinstance(attributes, ResourceAttributes):
        resource = {
            "verb": attributes.verb,
            "group": attributes.group,
            "version": attributes.version,
            "resource": attributes.resource,
            "subresource": attributes.subresource,
            "namespace": attributes.namespace,
            "name": attributes.name,
        }
        spec["resourceAttributes"] = {key: value for key, value in resource.items() if value}
    else:
        spec["nonResourceAttributes"] = {"path": attributes.path, "verb": attributes.verb}
    return {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}


def decision_of(answer: dict[str, object]) -> Decision:
    """The decision a SubjectAccessReview's answer carries: allowed only when `allowed` and not `denied`."""
    status = answer.get("status")
    if not isinstance(status, dict):
        return Decision(False, "the SubjectAccessReview came back without a status")
    allowed = status.get("allowed") is True and status.get("denied") is not True
    reason = status.get("reason") or status.get("evaluationError") or ""
    return Decision(allowed, reason if isinstance(reason, str) else "")
