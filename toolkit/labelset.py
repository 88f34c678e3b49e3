"""Pod labels, stored once per distinct set: most of a cluster's pods are replicas with equal labels, so a cache of
10,000 pods holds a few hundred label maps, not 10,000."""

from __future__ import annotations

import sys
import weakref
from collections.abc import Iterator, Mapping
from typing import Any


class LabelSet(Mapping[str, str]):
    """An immutable, hashable map of strings (a pod's labels; also its container ids -> names)."""

    __slots__ = ("__weakref__", "_hash", "_items")

    def __init__(self, items: Mapping[str, str] | None = None) -> None:
        self._items: dict[str, str] = dict(items or {})
        self._hash: int | None = None

    def __getitem__(self, key: str) -> str:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def get(self, key: str, default: Any = None) -> Any:
        return self._items.get(key, default)

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(frozenset(self._items.items()))
        return self._hash

    def __eq__(self, other: object) -> bool:
        if isinstance(other, LabelSet):
            return self._items == other._items
        if isinstance(other, Mapping):
            return self._items == dict(other)
        return NotImplemented

    def __repr__(self) -> str:
        return f"LabelSet({self._items!r})"


EMPTY_LABELS = LabelSet()


class LabelSets:
    """Hands out one shared `LabelSet` per distinct label map, with interned keys and values.

    Sets no pod uses any more are forgotten (weak references), so label churn (Jobs, rollouts) cannot grow it.
    Not thread-safe: one instance per writer thread.
    """

    def __init__(self) -> None:
        self._sets: weakref.WeakValueDictionary[tuple[str, ...], LabelSet] = weakref.WeakValueDictionary()

    def __call__(self, raw: Mapping[str, Any] | None) -> LabelSet:
        if not raw:
            return EMPTY_LABELS
        key = tuple(sys.intern(str(part)) for item in sorted(raw.items()) for part in item)
        found = self._sets.get(key)
        if found is None:
            found = LabelSet(dict(zip(key[::2], key[1::2], strict=True)))
            self._sets[key] = found
        return found

    def __len__(self) -> int:
        return len(self._sets)
