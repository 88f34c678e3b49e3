"""A census of a live process's heap, cheap between censuses: what bench/adapter_heap_soak.py's `--census` replica runs.

tracemalloc costs every allocation (a traced replica took 84-94% of a core where the others took 5-11%, fell behind
and grew by its requests in flight: docs/decisions/2026-11-28-adapter-hot-path.md). A census costs nothing between
counts and a few seconds at each: a thread wakes every few minutes and writes one JSON line of
- pymalloc's allocated blocks (`sys.getallocatedblocks`) and glibc's `mallinfo2` (bytes in use and free in malloc's
  arenas, and in mmap'd chunks): Python's small objects apart from C buffers and from free space the allocator keeps;
- the garbage collector's tracked objects by type, the frozen ones too (unfrozen for the count and frozen again:
  the objects still young are frozen a little before the settler's next pass would collect and freeze them);
- every large container (`LARGE` items or more) that a tracked object refers to, by where it is held: a module's
  global, an attribute's dict of a class's instance, or the holder's type; and the containers of containers whose
  items add up to as many (a dict of a dict per namespace: "place dict > containers"). The hot path's caches are dicts
  of strings and numbers, which the collector does not track, so they are found through their holders, not in
  gc.get_objects().

`growth(path)` reads the censuses back and says which counts grew most from the first to the last (a large
container's from the first census that lists it).
"""

from __future__ import annotations

import collections
import ctypes
import gc
import json
import sys
import threading
import time
import tracemalloc
from pathlib import Path
from typing import Any

LARGE = 1000  # items: a container this large is listed by where it is held
CONTAINERS = (dict, list, set)
TRACED_SITES = 40  # source lines kept in a census line, the most bytes first


class _MallInfo2(ctypes.Structure):  # glibc's struct mallinfo2 (malloc.h, glibc 2.33 and later)
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks")
    ] + [("keepcost", ctypes.c_size_t)]


def malloc_bytes() -> dict[str, int]:
    """glibc's counts, in bytes: in use and free in malloc's arenas, and in mmap'd chunks ({} off glibc 2.33+)."""
    try:
        mallinfo2 = ctypes.CDLL(None).mallinfo2  # the process's own symbols: the C library it runs on
    except (OSError, AttributeError):
        return {}
    mallinfo2.restype = _MallInfo2
    info = mallinfo2()
    return {"in_use": info.uordblks, "free": info.fordblks, "mmapped": info.hblkhd}


def census(large: int = LARGE) -> dict[str, Any]:
    """One count of this process's heap (see the module's docstring)."""
    started = time.monotonic()
    modules = {id(vars(m)): m.__name__ for m in list(sys.modules.values()) if hasattr(m, "__dict__")}
    frozen = gc.get_freeze_count()
    if frozen:  # gc.get_objects() lists the generations, not what gc.freeze() set aside (adapter/heap.py freezes)
        gc.unfreeze()
    try:
        objects = gc.get_objects()
    finally:
        if frozen:
            gc.freeze()  # frozen again, with what was young: what the settler's next pass does, less its collection
    types = collections.Counter(type(o).__qualname__ for o in objects)
    owners: dict[int, str] = {}  # id of an instance's attribute dict -> its class
    for o in objects:
        if not isinstance(o, (dict, list, tuple, set, frozenset)):
            for r in gc.get_referents(o):
                if type(r) is dict:
                    owners.setdefault(id(r), type(o).__qualname__)
    held: dict[int, tuple[str, int]] = {}  # id of a large container -> (where it is held, its length)
    # containers of containers (a dict of a dict per namespace): id -> [it, the containers in it, their items]
    within: dict[int, list[Any]] = {}
    holders: dict[int, object] = {}  # id of a container -> what holds it (the first found)
    for o in objects:
        try:
            for r in gc.get_referents(o):
                if type(r) in CONTAINERS:
                    holders.setdefault(id(r), o)
                    if id(r) not in held and len(r) >= large:
                        held[id(r)] = (f"{_holder(o, r, modules, owners)} {type(r).__name__}", len(r))
                    if type(o) in CONTAINERS:
                        counts = within.setdefault(id(o), [o, 0, 0])
                        counts[1] += 1
                        counts[2] += len(r)
        except RuntimeError:  # a dict that changed size while looked through: the next census counts it
            continue
    del objects
    nests: list[tuple[str, int]] = []  # (where a container of containers is held, the items in them)
    for container, count, items in within.values():
        holder = holders.get(id(container))
        if count > 1 and items >= large and holder is not None:
            place = _holder(holder, container, modules, owners)
            nests.append((f"{place} {type(container).__name__} > containers", items))
    del holders, within
    by_place: dict[str, list[int]] = {}
    for place, length in [*held.values(), *nests]:
        by_place.setdefault(place, []).append(length)
    return {
        "blocks": sys.getallocatedblocks(),
        "frozen": frozen,
        "malloc": malloc_bytes(),
        "types": dict(types),
        "large": {place: [len(lengths), sum(lengths)] for place, lengths in by_place.items()},
        "seconds": round(time.monotonic() - started, 3),
    }


def _holder(holder: object, child: object, modules: dict[int, str], owners: dict[int, str]) -> str:
    if type(holder) is dict:
        for key, value in list(holder.items()):
            if value is child:
                if id(holder) in modules:
                    return f"{modules[id(holder)]}[{str(key)[:60]}]"
                if id(holder) in owners:  # an instance's attributes, as the instance itself names them below
                    return f"{owners[id(holder)]}.{str(key)[:60]}"
                return f"dict[{str(key)[:60]}]"
        return f"{modules.get(id(holder)) or owners.get(id(holder)) or 'dict'} (a key)"
    attributes = getattr(holder, "__dict__", None) if not isinstance(holder, type) else None
    # an instance's attribute: CPython 3.11 lists its values, not its dict, as referents until the dict is asked for
    # (here, and then the dict is what the next census finds: the label is the same either way)
    if type(attributes) is dict:
        for key, value in list(attributes.items()):
            if value is child:
                return f"{type(holder).__qualname__}.{key}"
    return type(holder).__qualname__


def traced_sites(shown: int = TRACED_SITES) -> dict[str, list[int]]:
    """The source lines holding the most bytes that tracemalloc has seen allocated since it started and that are still
    alive: line -> [bytes, blocks]."""
    snapshot = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(False, tracemalloc.__file__)])
    return {
        f"{Path(stat.traceback[0].filename).name}:{stat.traceback[0].lineno}": [stat.size, stat.count]
        for stat in snapshot.statistics("lineno")[:shown]
    }


def start(
    first: float, every: float, out: Path, trace: bool = False, stop: threading.Event | None = None
) -> threading.Thread:
    """A daemon thread writing a census to `out` (a JSON line each, with the seconds since this call) after `first`
    seconds and every `every` seconds after. `trace`: tracemalloc starts after the first census, one frame a block
    (what a traced replica costs from its start is what made it fall behind), and each later census adds the lines
    holding the most of what was allocated since and is still alive (`traced_sites`). `stop`: set, the thread ends
    after its current census."""
    started = time.monotonic()
    stopped = stop or threading.Event()

    def run() -> None:
        if stopped.wait(first):
            return
        while True:
            line = census()
            if tracemalloc.is_tracing():
                line["traced"] = traced_sites()
            elif trace:
                tracemalloc.start(1)
            line["elapsed"] = round(time.monotonic() - started, 1)
            with out.open("a") as f:
                f.write(json.dumps(line) + "\n")
            if stopped.wait(every):
                return

    thread = threading.Thread(target=run, name="heap-census", daemon=True)
    thread.start()
    return thread


def growth(path: Path, shown: int = 12) -> list[str]:
    """The report of a census file: the first and last census, and what grew most between them."""
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
    if len(lines) < 2:
        return ["census       fewer than two censuses: run longer than the settle time plus --census-every"]
    first, last = lines[0], lines[-1]
    minutes = (last["elapsed"] - first["elapsed"]) / 60
    report = [
        f"census       {len(lines)} censuses over {minutes:.0f} min (each {max(c['seconds'] for c in lines):.1f} s"
        f" at most); pymalloc blocks {first['blocks']:,} -> {last['blocks']:,}"
    ]
    if first["malloc"] and last["malloc"]:
        report.append(
            "             malloc's MiB: "
            + ", ".join(
                f"{key} {first['malloc'][key] / 2**20:.1f} -> {last['malloc'][key] / 2**20:.1f}"
                for key in ("in_use", "free", "mmapped")
            )
        )
    types = _grew(first["types"], last["types"])[:shown]
    report.append("             tracked objects grown most: " + ", ".join(f"{t} {d:+,}" for t, d in types))
    listed = _first_listed(lines)
    places = _grew({p: v[1] for p, (_, v) in listed.items()}, {p: v[1] for p, v in last["large"].items()})[:shown]
    for place, delta in places:
        count, items = last["large"].get(place, [0, 0])
        since, _ = listed[place]
        later = f"; listed from census {since + 1}, under {LARGE:,} items before" if since else ""
        report.append(f"  {delta:+9,} items  {place}  ({count} containers, {items:,} items now{later})")
    traced = [c["traced"] for c in lines if "traced" in c]
    if len(traced) >= 2:
        sites = _grew({k: v[0] for k, v in traced[0].items()}, {k: v[0] for k, v in traced[-1].items()})[:shown]
        report.append("             traced since the first census, the lines whose live bytes grew most:")
        report.extend(
            f"  {delta / 2**10:+9,.1f} KiB  {site}  ({traced[-1].get(site, [0])[0] / 2**10:,.1f} KiB now)"
            for site, delta in sites
        )
    return report


def _first_listed(lines: list[dict[str, Any]]) -> dict[str, tuple[int, list[int]]]:
    """Each large container's place: the index of the first census that lists it (a container is listed once it holds
    LARGE items) and its [containers, items] there. Growth is counted from there: a place absent from the first census
    held fewer than LARGE items then, not none."""
    listed: dict[str, tuple[int, list[int]]] = {}
    for index, line in enumerate(lines):
        for place, counts in line["large"].items():
            listed.setdefault(place, (index, counts))
    return listed


def _grew(before: dict[str, int], after: dict[str, int]) -> list[tuple[str, int]]:
    deltas = [(key, after.get(key, 0) - before.get(key, 0)) for key in before.keys() | after.keys()]
    return sorted((d for d in deltas if d[1]), key=lambda d: -abs(d[1]))
