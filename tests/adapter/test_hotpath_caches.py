"""The hot path's caches (adapter/hotpath_caches.py): bounded, and what they give is what is worked out afresh (the
quantity and decimal caches are held to that in tests/adapter/test_wire_formats.py)."""

from __future__ import annotations

from unittest.mock import patch

from hypothesis import given
from hypothesis import strategies as st

from adapter import hotpath_caches
from adapter.api.bodies import _described_object, described_object
from adapter.hotpath_caches import described_texts, keep, keep_described


@given(st.lists(st.integers(min_value=0, max_value=50), max_size=200), st.integers(min_value=1, max_value=10))
def test_a_kept_cache_never_holds_more_than_its_bound_and_keeps_the_newest(keys: list[int], bound: int) -> None:
    cache: dict[int, str] = {}
    for key in keys:
        assert keep(cache, key, f"v{key}", bound) == f"v{key}"
        assert len(cache) <= bound
        assert cache.get(key) == f"v{key}"


@given(st.sampled_from(["ml", "other", None]), st.text(min_size=1, max_size=20))
def test_a_described_object_text_is_the_one_made_afresh_and_is_kept(namespace: str | None, name: str) -> None:
    made = _described_object("Pod", "/v1", namespace, name)
    assert described_object("Pod", "/v1", namespace, name) == made
    assert described_texts("Pod", "/v1", namespace).get(name) == made
    assert described_object("Pod", "/v1", namespace, name) == made


@given(
    st.lists(
        st.tuples(st.sampled_from(["ml", "other", "third", None]), st.text(alphabet="abc-", min_size=1, max_size=3)),
        max_size=200,
    ),
    st.integers(min_value=1, max_value=8),
)
def test_described_texts_are_bounded_over_all_namespaces_and_stay_what_is_made_afresh(
    asked: list[tuple[str | None, str]], bound: int
) -> None:
    """Pods replaced under new names in many namespaces: never more than DESCRIBED_NAMES texts in all (a bound per
    namespace let each namespace fill), and each answer's text is the one made afresh, before and after forgetting."""
    with patch.object(hotpath_caches, "DESCRIBED_NAMES", bound):
        hotpath_caches._forget_described()
        for namespace, name in asked:
            assert described_object("Pod", "/v1", namespace, name) == _described_object("Pod", "/v1", namespace, name)
            assert sum(len(texts) for texts in hotpath_caches._DESCRIBED.values()) <= bound


def test_a_namespaces_texts_held_while_the_texts_are_forgotten_stay_usable() -> None:
    """`CustomItems.add_pods` holds a namespace's dict across its pods: forgetting empties it in place."""
    with patch.object(hotpath_caches, "DESCRIBED_NAMES", 2):
        hotpath_caches._forget_described()
        texts = described_texts("Pod", "/v1", "ml")
        for name in ("a", "b", "c"):
            keep_described(texts, name, _described_object("Pod", "/v1", "ml", name))
        assert texts == {"c": _described_object("Pod", "/v1", "ml", "c")}
        assert described_texts("Pod", "/v1", "ml") is texts


def test_described_texts_are_forgotten_every_described_seconds_so_replaced_pods_leave_nothing_behind() -> None:
    """Under churn, names asked about once stay no longer than DESCRIBED_SECONDS: what is kept is the pods asked about
    since the texts were last forgotten (the heap soak's growth, docs/decisions/2026-11-28-adapter-hot-path.md)."""
    start = 1000.0
    with patch.object(hotpath_caches, "_described_since", start):
        hotpath_caches._forget_described()
        texts = described_texts("Pod", "/v1", "ml", now=start)
        keep_described(texts, "old", _described_object("Pod", "/v1", "ml", "old"))
        later = start + hotpath_caches.DESCRIBED_SECONDS - 0.001
        assert described_texts("Pod", "/v1", "ml", now=later) is texts and "old" in texts
        kept = described_texts("Pod", "/v1", "other", now=later)
        keep_described(kept, "b", _described_object("Pod", "/v1", "other", "b"))
        again = described_texts("Pod", "/v1", "ml", now=start + hotpath_caches.DESCRIBED_SECONDS)
        assert again == {} and texts == {} and kept == {}  # a dict an answer still holds was emptied in place
        assert hotpath_caches._DESCRIBED == {("Pod", "/v1", "ml"): again}
