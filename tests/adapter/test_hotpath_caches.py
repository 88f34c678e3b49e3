"""The hot path's caches (adapter/hotpath_caches.py): bounded, and what they give is what is worked out afresh (the
quantity and decimal caches are held to that in tests/adapter/test_wire_formats.py)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from adapter.api.bodies import _described_object, described_object
from adapter.hotpath_caches import described_texts, keep


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
