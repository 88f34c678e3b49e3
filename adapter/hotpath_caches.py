"""The hot path's caches, in one place: what the adapter works out once and then looks up.

Figures (a percent to a tenth, a GPU's memory size), sample seconds and pod names repeat across node documents and
answers, so their decimals and texts are kept here, each a plain dict bounded by `keep`. Not functools.lru_cache, which
keys each call by a tuple the garbage collector tracks; a dict of strings and numbers is never tracked
(docs/decisions/2026-11-28-adapter-hot-path.md). Callers look up with the dict's `get` and store with `keep`, or, for
the describedObject texts (a dict per namespace, bounded over all of them and forgotten every ten minutes),
`keep_described`. Nothing else here: what each value is stays with the code that works it out.
"""

from __future__ import annotations

import time
from decimal import Decimal
from typing import TypeVar

K = TypeVar("K")
V = TypeVar("V")


def keep(cache: dict[K, V], key: K, value: V, bound: int) -> V:
    """Store `value` under `key` in `cache`, a dict of at most `bound` keys: a full one starts over (no order of use to
    keep up). Returns `value`. The caches stay plain dicts, looked up with `get`: a subclass's lookups cost more."""
    if len(cache) >= bound:
        cache.clear()
    cache[key] = value
    return value


# A JSON number of a /pods document as the decimal it stands for (device_figures.exact; None: not finite). Integers and
# floats apart: 100 and 100.0 are one key to a dict, but not one decimal (100, 1E+2).
EXACT_FLOATS: dict[float, Decimal | None] = {}
EXACT_INTS: dict[int, Decimal | None] = {}
EXACT_BOUND = 65536

# A served value's canonical quantity text (adapter.api.bodies.quantity), by value.
QUANTITY_TEXTS: dict[Decimal, str] = {}
QUANTITY_BOUND = 16384

# A whole second's RFC 3339 text (adapter.api.bodies.rfc3339): an answer's items share a few sample seconds.
SECOND_TEXTS: dict[int, str] = {}
SECOND_BOUND = 256

# describedObject texts (adapter.api.bodies.described_object) by (kind, apiVersion, namespace) and then name: an HPA's
# question renders one per pod, and two lookups by strings (whose hashes Python keeps) cost less than one by a key of
# four. Pods replaced under new names leave their texts (and names) behind, so all are forgotten every
# DESCRIBED_SECONDS: what is kept is the objects asked about since, not every name ever asked about; and at most
# DESCRIBED_NAMES names over all namespaces meanwhile, a bound per namespace letting each namespace fill
# (docs/decisions/2026-11-28-adapter-hot-path.md, the heap soak). Forgotten, a text costs its making again once.
DESCRIBED_SECONDS = 600.0
DESCRIBED_NAMES = 65536
_DESCRIBED: dict[tuple[str, str, str | None], dict[str, str]] = {}
_described_names = 0  # names stored since the texts were last forgotten
_described_since: float | None = None  # time.monotonic() when they were last forgotten


def described_texts(kind: str, api_version: str, namespace: str | None, now: float | None = None) -> dict[str, str]:
    """The describedObject texts of `kind` objects in `namespace` (None: objects that are not namespaced), by name:
    look up with `get`, store with `keep_described`. `now`: time.monotonic() unless given; past DESCRIBED_SECONDS
    since the texts were last forgotten, they are forgotten."""
    global _described_since
    at = time.monotonic() if now is None else now
    if _described_since is None or at - _described_since >= DESCRIBED_SECONDS:
        _start_described_over()
        _described_since = at
    key = (kind, api_version, namespace)
    texts = _DESCRIBED.get(key)
    if texts is None:
        if len(_DESCRIBED) >= DESCRIBED_NAMES:  # namespaces come and go too: past as many as names, start over
            _start_described_over()
        texts = _DESCRIBED[key] = {}
    return texts


def keep_described(texts: dict[str, str], name: str, text: str) -> str:
    """Store `text` under `name` in `texts` (from `described_texts`, where `name` is not yet); past DESCRIBED_NAMES
    names in all, every namespace's texts are forgotten first, emptied in place (a caller's dict stays valid)."""
    global _described_names
    if _described_names >= DESCRIBED_NAMES:
        _forget_described()
    texts[name] = text
    _described_names += 1
    return text


def _forget_described() -> None:
    """Every namespace's texts emptied in place: a dict a caller holds from `described_texts` stays valid."""
    global _described_names
    for texts in _DESCRIBED.values():
        texts.clear()
    _described_names = 0


def _start_described_over() -> None:
    """The texts forgotten and the namespaces too, after age or past DESCRIBED_NAMES namespaces."""
    _forget_described()
    _DESCRIBED.clear()
