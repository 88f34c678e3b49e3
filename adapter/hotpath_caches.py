"""The hot path's caches, in one place: what the adapter works out once and then looks up.

Figures (a percent to a tenth, a GPU's memory size), sample seconds and pod names repeat across node documents and
answers, so their decimals and texts are kept here, each in a `BoundedDict`. Plain dicts, not functools.lru_cache,
which keys each call by a tuple the garbage collector tracks; a dict of strings and numbers is never tracked
(docs/decisions/2026-11-28-adapter-hot-path.md). Callers look up with `get` (a plain dict lookup) and store with
`keep`. Nothing else here: what each value is stays with the code that works it out.
"""

from __future__ import annotations

from decimal import Decimal
from typing import TypeVar

K = TypeVar("K")
V = TypeVar("V")


class BoundedDict(dict[K, V]):
    """A dict of at most `bound` keys: `keep` starts it over when it is full (no order of use to keep up)."""

    __slots__ = ("bound",)

    def __init__(self, bound: int) -> None:
        super().__init__()
        self.bound = bound

    def keep(self, key: K, value: V) -> V:
        """Store `value` under `key` and return it."""
        if len(self) >= self.bound:
            self.clear()
        self[key] = value
        return value


# A JSON number of a /pods document as the decimal it stands for (device_figures.exact; None: not finite). Integers and
# floats apart: 100 and 100.0 are one key to a dict, but not one decimal (100, 1E+2).
EXACT_FLOATS: BoundedDict[float, Decimal | None] = BoundedDict(65536)
EXACT_INTS: BoundedDict[int, Decimal | None] = BoundedDict(65536)

# A served value's canonical quantity text (adapter.api.bodies.quantity), by value.
QUANTITY_TEXTS: BoundedDict[Decimal, str] = BoundedDict(16384)

# A whole second's RFC 3339 text (adapter.api.bodies.rfc3339): an answer's items share a few sample seconds.
SECOND_TEXTS: BoundedDict[int, str] = BoundedDict(256)

# describedObject texts (adapter.api.bodies.described_object) by (kind, apiVersion, namespace) and then name: an HPA's
# question renders one per pod, and two lookups by strings (whose hashes Python keeps) cost less than one by a key of
# four. At most DESCRIBED_NAMES names in a namespace, and DESCRIBED_NAMESPACES namespaces.
DESCRIBED_NAMES = 32768
DESCRIBED_NAMESPACES = 4096
_DESCRIBED: BoundedDict[tuple[str, str, str | None], BoundedDict[str, str]] = BoundedDict(DESCRIBED_NAMESPACES)


def described_texts(kind: str, api_version: str, namespace: str | None) -> BoundedDict[str, str]:
    """The describedObject texts of `kind` objects in `namespace` (None: objects that are not namespaced), by name."""
    key = (kind, api_version, namespace)
    texts = _DESCRIBED.get(key)
    if texts is None:
        texts = _DESCRIBED.keep(key, BoundedDict(DESCRIBED_NAMES))
    return texts
