"""The short memories of authentication and authorization: expiry, bounds, and shared loads."""

from __future__ import annotations

import asyncio
import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kubernetes.client import ApiClient

from adapter.auth.identity import AuthenticationUnavailableError, Decision, ResourceAttributes, UserInfo
from adapter.auth.sar import SubjectAccessReviewer
from adapter.auth.tokenreview import TokenReviewer
from toolkit.tokenreview import _REJECTED as REJECTED  # the cluster's "no", as the reviewer keeps it
from toolkit.tokenreview import NEW_BURST, ReviewedUser
from toolkit.ttlcache import CoalescingCache, ExpiringCache

operations = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.integers(0, 5), st.floats(0, 20)),
        st.tuples(st.just("get"), st.integers(0, 5), st.just(0.0)),
        st.tuples(st.just("wait"), st.just(0), st.floats(0, 15)),
    ),
    max_size=40,
)


@given(operations, st.integers(1, 4))
def test_expiring_cache_agrees_with_a_model(ops: list[tuple[str, int, float]], bound: int) -> None:
    now = [0.0]
    cache: ExpiringCache[int, str] = ExpiringCache(bound, clock=lambda: now[0])
    model: dict[int, tuple[float, str]] = {}  # key -> (expiry, value), in recency order
    for op, key, number in ops:
        if op == "wait":
            now[0] += number
        elif op == "put":
            if number > 0:
                model.pop(key, None)
                model[key] = (now[0] + number, f"v{key}@{now[0]}")
                while len(model) > bound:
                    del model[next(iter(model))]
            cache.put(key, f"v{key}@{now[0]}", number)
        else:
            entry = model.pop(key, None)
            want = None
            if entry is not None and now[0] < entry[0]:
                model[key] = entry  # most recently used now
                want = entry[1]
            assert cache.get(key) == want
        assert len(cache) <= bound


async def test_concurrent_misses_share_one_load_and_failures_are_not_kept() -> None:
    cache: CoalescingCache[str, str] = CoalescingCache(16)
    loads = 0
    release = asyncio.Event()

    async def load() -> str:
        nonlocal loads
        loads += 1
        await release.wait()
        return "yes"

    waiters = [asyncio.create_task(cache.get("k", load, lambda _: 10.0)) for _ in range(5)]
    await asyncio.sleep(0)
    waiters[0].cancel()  # a client that hangs up does not cancel the load for the others
    release.set()
    assert await asyncio.gather(*waiters[1:]) == ["yes"] * 4
    assert loads == 1
    assert await cache.get("k", load, lambda _: 10.0) == "yes" and loads == 1

    async def broken() -> str:
        raise RuntimeError("cluster unreachable")

    with pytest.raises(RuntimeError):
        await cache.get("other", broken, lambda _: 10.0)
    assert await cache.get("other", load, lambda _: 10.0) == "yes"  # the failure was not cached


async def test_an_entry_asked_for_late_in_its_life_is_loaded_again_without_waiting() -> None:
    now = [0.0]
    cache: CoalescingCache[str, int] = CoalescingCache(16, clock=lambda: now[0], refresh_ahead=0.5)
    loads = 0
    release = asyncio.Event()

    async def load() -> int:
        nonlocal loads
        loads += 1
        if loads > 1:
            await release.wait()
        return loads

    assert await cache.get("k", load, lambda _: 10.0) == 1
    now[0] = 4.0  # in the first half of its life: answered, nothing loaded
    assert await cache.get("k", load, lambda _: 10.0) == 1
    await asyncio.sleep(0)
    assert loads == 1
    now[0] = 6.0  # in the last half: still answered at once, and loaded again in the background
    assert await cache.get("k", load, lambda _: 10.0) == 1
    assert await cache.get("k", load, lambda _: 10.0) == 1  # one background load at a time
    await asyncio.sleep(0)
    assert loads == 2
    release.set()
    for _ in range(3):
        await asyncio.sleep(0)
    assert await cache.get("k", load, lambda _: 10.0) == 2  # the fresh answer, with a life from its load
    now[0] = 6.0 + 10.0  # past that life: a caller waits for a load again, never gets an expired answer
    assert await cache.get("k", load, lambda _: 10.0) == 3


async def test_entries_asked_for_recently_are_kept_fresh_without_anyone_asking() -> None:
    now = [0.0]
    cache: CoalescingCache[str, int] = CoalescingCache(16, clock=lambda: now[0], keep_fresh=30.0)
    loads = 0

    async def load() -> int:
        nonlocal loads
        loads += 1
        return loads

    assert await cache.get("k", load, lambda _: 10.0) == 1
    now[0] = 4.0
    assert cache.refresh_due() == 0  # early in its life: nothing to do
    now[0] = 6.0
    assert cache.refresh_due() == 1  # late in its life and asked for recently: loaded again, nobody waiting
    await asyncio.sleep(0)
    now[0] = 12.0  # past the first load's life: the second answers at once
    assert await cache.get("k", load, lambda _: 10.0) == 2 and loads == 2
    now[0] = 12.0 + 31.0  # not asked for within keep_fresh: forgotten, not loaded again
    assert cache.refresh_due() == 0
    assert loads == 2


async def test_a_steady_client_costs_one_review_per_decision_life_and_never_waits() -> None:
    """An HPA controller asking steadily: its decision is renewed in the background about once per 10-s life (not
    twice), and no request after the first waits for a review."""
    now = [0.0]
    reviewer = SubjectAccessReviewer(ApiClient(), clock=lambda: now[0])
    reviews: list[float] = []

    async def review(user: UserInfo, attributes: object) -> Decision:
        reviews.append(now[0])
        await asyncio.sleep(0.02)  # a review takes a while: a request that waited for one would be seen waiting
        return Decision(True, "")

    reviewer._review = review  # type: ignore[method-assign]  # the review itself is tested against the API stand-in
    user = UserInfo("system:serviceaccount:kube-system:horizontal-pod-autoscaler")
    attributes = ResourceAttributes("get", "custom.metrics.k8s.io", "pods", "v1beta2", "gpu_utilization", "ml", "*")
    assert (await reviewer.authorize(user, attributes)).allowed
    for second in range(1, 60):
        now[0] = float(second)
        decision = await asyncio.wait_for(reviewer.authorize(user, attributes), 0.01)  # from the cache, at once
        assert decision.allowed
        await asyncio.sleep(0.04)  # a background review, if one started, finishes
    assert reviews[0] == 0.0 and len(reviews) == 8  # at 0, then every 8 s: in the last quarter of each life


async def test_a_flood_of_new_bearer_tokens_is_not_a_flood_of_token_reviews() -> None:
    """2,000 random tokens were 2,000 TokenReviews in 6.3 s through the adapter (issue 42): new tokens are reviewed at
    a bounded rate, the rest refused without a review and counted as authentication errors (each a 401), and the
    token of a client the cluster accepted lately is reviewed whatever the flood."""
    now = [0.0]
    reviewer = TokenReviewer(ApiClient(), clock=lambda: now[0])
    reviewed: list[str] = []

    def review(token: str) -> ReviewedUser:
        reviewed.append(token)
        return (
            ReviewedUser("system:serviceaccount:kube-system:horizontal-pod-autoscaler") if token == "hpa" else REJECTED
        )

    reviewer._reviewer._review = review  # type: ignore[method-assign]  # the review itself: tests/exporter/test_access.py
    assert await reviewer.review("hpa") is not None
    refused = 0
    for number in range(300):
        try:
            assert await reviewer.review(f"random-{number}") is None
        except AuthenticationUnavailableError:
            refused += 1
    assert len(reviewed) == NEW_BURST and refused == reviewer.failures == 300 - (NEW_BURST - 1)
    now[0] = 61.0  # every cached answer expired; the HPA's token is still one the cluster accepted lately
    for number in range(300, 400):
        with contextlib.suppress(AuthenticationUnavailableError):
            await reviewer.review(f"random-{number}")
    assert await reviewer.review("hpa") is not None, "reviewed despite the flood"
    assert reviewed.count("hpa") == 2
