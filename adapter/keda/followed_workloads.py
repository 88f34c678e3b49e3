"""The workloads whose activity KEDA asks about, each observed every `interval` seconds while it is asked about.

`IsActive` (KEDA asks every `pollingInterval`) and `StreamIsActive` (KEDA holds it open) answer from the same followed
state, so hysteresis works whichever KEDA uses, and both agree: KEDA acts on a pushed activation at once, but
deactivates only through its polled `IsActive` (pkg/scaling/scale_handler.go, startPushScalers: "inactivation events
are ignored"). Two triggers asking the same (namespace, metric, selector, activation target) share one followed
workload. A workload nobody has asked about for `keep_for` seconds and that no stream follows is dropped; at most
`capacity` are followed at once.

At the capacity, a new workload takes the place of one asked about only once and followed by no stream, the one asked
longest ago: KEDA asks about each of its workloads every `pollingInterval` (or holds a stream), so after its second
question a workload KEDA really asks about is out of reach of a flood of made-up triggers, which only displace one
another (one caller filled all 10,000 places for 15 minutes, and KEDA's new triggers were refused). Only when every
place holds a workload asked about twice or streamed is a new one refused (BoardFullError).

Each workload is counted against the caller that first asked about it (keda/callers.py: its client certificate's
user, or its peer's address), and a caller holds at most `per_caller` places (half the capacity by default): past it,
its new workload takes the place of its own asked-once one asked longest ago, or is refused. A caller asking about each
of its made-up triggers twice therefore fills only its share, never the places of the workloads KEDA asks about.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from decimal import Decimal

from adapter.keda.activity import UNKNOWN_STATE, ActivityState, Hysteresis, Observation
from adapter.keda.trigger import Trigger
from adapter.keda.workload import NoFiguresError, Reading, WorkloadReader
from adapter.sources.metricsource import SourceError, SourceUnavailableError
from toolkit.logs import fields

log = logging.getLogger(__name__)

WorkloadKey = tuple[str, str, str, Decimal]
# a demand trigger's workload is observed this often (its gateway is read at most every refresh_seconds, shared): one
# request waiting turns IsActive true within refresh + this, under a second with the defaults
DEMAND_INTERVAL = 0.25
DEFAULT_KEEP_FOR = 900.0  # longer than any sensible pollingInterval: a trigger asked less often starts afresh


class BoardFullError(Exception):
    """Too many workloads followed at once."""


class ActivityUnknownError(Exception):
    """The workload's activity is not known yet; `cause` says why (no figures, the source unavailable)."""

    def __init__(self, cause: Exception) -> None:
        super().__init__(str(cause))
        self.cause = cause


class FollowedWorkload:
    """One workload's activity, as observed so far."""

    def __init__(self, namespace: str, trigger: Trigger, now: float, caller: str = "") -> None:
        self.namespace = namespace
        self.caller = caller  # the caller that first asked about it, whose share it counts against
        self.trigger = trigger
        self.state: ActivityState = UNKNOWN_STATE
        self.problem: Exception | None = None  # why the last observation was unknown
        self.asked_at = now
        self.asked_again = False  # asked about a second time (or followed by a stream): KEDA's, not a passer-by's
        self.streams = 0
        self._changed = asyncio.Event()
        self.closed = False

    def record(self, state: ActivityState, problem: Exception | None) -> bool:
        """Keep the new state; True when `active` changed (streams are woken)."""
        changed = state.active != self.state.active
        self.state, self.problem = state, problem
        if changed:
            self._wake()
        return changed

    def close(self) -> None:
        self.closed = True
        self._wake()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def next_change(self) -> None:
        await self._changed.wait()


class ActivityBoard:
    def __init__(
        self,
        reader: WorkloadReader,
        hysteresis: Hysteresis,
        *,
        interval: float = 2.0,
        demand_interval: float = DEMAND_INTERVAL,
        observe_timeout: float = 5.0,
        keep_for: float = DEFAULT_KEEP_FOR,
        capacity: int = 10_000,
        per_caller: int | None = None,
        clock: Callable[[], float] = time.monotonic,
        on_change: Callable[[bool], None] = lambda active: None,
    ) -> None:
        self._reader = reader
        self._hysteresis = hysteresis
        self._interval = interval
        self._demand_interval = min(interval, demand_interval)
        self._observe_timeout = observe_timeout
        self._keep_for = keep_for
        self._capacity = capacity
        self._per_caller = per_caller if per_caller is not None else max(1, capacity // 2)
        self._held: dict[str, int] = {}  # places each caller's workloads hold
        self._clock = clock
        self._on_change = on_change
        self._followed: dict[WorkloadKey, FollowedWorkload] = {}
        self._first: dict[WorkloadKey, asyncio.Task[None]] = {}
        self._once: dict[WorkloadKey, None] = {}  # the workloads asked about once, in the order they were asked
        self._loop: asyncio.Task[None] | None = None
        self.displaced = 0  # workloads asked about once, dropped at the capacity for a new one

    @property
    def size(self) -> int:
        return len(self._followed)

    # ---- lifecycle --------------------------------------------------------------------------------------------------
    async def start(self) -> None:
        self._loop = asyncio.create_task(self._observe_forever(), name="keda-activity")

    async def stop(self) -> None:
        if self._loop is not None:
            self._loop.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loop
            self._loop = None
        for followed in self._followed.values():
            followed.close()
        self._followed.clear()
        self._once.clear()
        self._held.clear()

    def follows(self, namespace: str, trigger: Trigger) -> bool:
        """Whether the workload's activity is followed now."""
        return trigger.key(namespace) in self._followed

    # ---- what the API asks ------------------------------------------------------------------------------------------
    def held_by(self, caller: str) -> int:
        """How many places the workloads `caller` first asked about hold."""
        return self._held.get(caller, 0)

    async def is_active(self, namespace: str, trigger: Trigger, caller: str = "") -> bool:
        """The workload's activity now. ActivityUnknownError while nothing is known; BoardFullError."""
        followed = await self._followed_workload(namespace, trigger, caller)
        active = followed.state.active
        if active is None:
            raise ActivityUnknownError(followed.problem or NoFiguresError("no figures observed yet"))
        return active

    async def follow(self, namespace: str, trigger: Trigger, caller: str = "") -> AsyncIterator[bool]:
        """The workload's activity once it is known, then at every change, until the board stops."""
        followed = await self._followed_workload(namespace, trigger, caller)
        for _ in range(2):  # made room for others while its first observation ran: follow it afresh
            if not followed.closed:
                break
            followed = await self._followed_workload(namespace, trigger, caller)
        followed.streams += 1
        self._asked_again(trigger.key(namespace), followed)
        try:
            sent: bool | None = None
            while not followed.closed:
                change = asyncio.ensure_future(followed.next_change())
                try:
                    active = followed.state.active
                    if active is not None and active != sent:
                        sent = active
                        yield active
                    await change
                finally:
                    change.cancel()
        finally:
            followed.streams -= 1
            followed.asked_at = self._clock()

    # ---- inside -----------------------------------------------------------------------------------------------------
    async def _followed_workload(self, namespace: str, trigger: Trigger, caller: str) -> FollowedWorkload:
        key = trigger.key(namespace)
        followed = self._followed.get(key)
        now = self._clock()
        if followed is None:
            if self.held_by(caller) >= self._per_caller:
                self._make_room(caller)
            elif len(self._followed) >= self._capacity:
                self._make_room()
            followed = self._followed[key] = FollowedWorkload(namespace, trigger, now, caller)
            self._held[caller] = self.held_by(caller) + 1
            self._once[key] = None
            first = self._first[key] = asyncio.ensure_future(self._observe(followed))
            first.add_done_callback(lambda done: self._first.pop(key) if self._first.get(key) is done else None)
        elif not followed.asked_again:
            self._asked_again(key, followed)
        followed.asked_at = now
        pending = self._first.get(key)
        if pending is not None:  # the first observation: every early caller waits for the same one
            await asyncio.shield(pending)
        return followed

    def _make_room(self, caller: str | None = None) -> None:
        """Drop the workload asked about once, longest ago (no stream follows it), of `caller`'s when given;
        BoardFullError when none is."""
        if caller is None:
            key = next(iter(self._once), None)
        else:
            key = next((k for k in self._once if self._followed[k].caller == caller), None)
        if key is None:
            if caller is not None:
                raise BoardFullError(
                    f"already following {self._per_caller} workloads' activity for this caller (its share of the "
                    f"{self._capacity} places), each asked about more than once"
                )
            raise BoardFullError(
                f"already following {self._capacity} workloads' activity, each asked about more than once"
            )
        del self._once[key]
        self._drop(key)
        self.displaced += 1

    def _drop(self, key: WorkloadKey) -> None:
        followed = self._followed.pop(key)
        held = self._held.get(followed.caller, 0) - 1
        if held > 0:
            self._held[followed.caller] = held
        else:
            self._held.pop(followed.caller, None)
        followed.close()

    def _asked_again(self, key: WorkloadKey, followed: FollowedWorkload) -> None:
        followed.asked_again = True
        self._once.pop(key, None)

    async def _observe(self, followed: FollowedWorkload) -> None:
        seen, problem = await self._observation(followed)
        before = followed.state.active
        state = self._hysteresis.step(followed.state, seen, self._clock())
        if followed.record(state, problem) and before is not None:
            assert state.active is not None
            self._on_change(state.active)
            log.info(
                "workload %s/%s is %s",
                followed.namespace,
                followed.trigger.selector,
                "active" if state.active else "inactive",
                extra=fields(
                    namespace=followed.namespace,
                    selector=followed.trigger.selector,
                    metric=followed.trigger.metric,
                    activation_target=str(followed.trigger.activation_target),
                ),
            )

    async def _observation(self, followed: FollowedWorkload) -> tuple[Observation, Exception | None]:
        try:
            async with asyncio.timeout(self._observe_timeout):
                reading: Reading = await self._reader.read(followed.namespace, followed.trigger)
        except (NoFiguresError, SourceUnavailableError, SourceError) as exc:
            return Observation.UNKNOWN, exc
        except TimeoutError:
            return Observation.UNKNOWN, SourceUnavailableError(
                f"the source did not answer within {self._observe_timeout:g} s"
            )
        except Exception as exc:  # a defect must not stop the other workloads' observations
            log.exception(
                "observing %s/%s failed",
                followed.namespace,
                followed.trigger.selector,
                extra=fields(namespace=followed.namespace, selector=followed.trigger.selector),
            )
            return Observation.UNKNOWN, exc
        if reading.selected == 0:
            return Observation.NO_PODS, None
        if reading.demand and not reading.busy(followed.trigger.activation_target):
            return Observation.NOTHING_WAITING, None
        return (Observation.BUSY if reading.busy(followed.trigger.activation_target) else Observation.QUIET), None

    async def observe_all(self, *, demand_only: bool = False) -> None:
        """Observe every followed workload once (only demand triggers' with `demand_only`), after dropping those
        nobody asked about for `keep_for` seconds."""
        now = self._clock()
        for key, followed in list(self._followed.items()):
            if followed.streams == 0 and now - followed.asked_at > self._keep_for and key not in self._first:
                self._once.pop(key, None)
                self._drop(key)
        due = [
            f for k, f in self._followed.items() if k not in self._first and (f.trigger.of_demand or not demand_only)
        ]
        if due:
            await asyncio.gather(*(self._observe(f) for f in due))

    async def _observe_forever(self) -> None:
        loop = asyncio.get_running_loop()  # the loop's clock paces the rounds; the injected one ages the workloads
        started = loop.time()
        rounds = 0
        while True:
            await asyncio.sleep(self._demand_interval)
            everything = loop.time() - started >= (rounds + 1) * self._interval
            rounds += everything
            try:
                await self.observe_all(demand_only=not everything)
            except Exception:  # keep observing: a stuck state is worse than one failed round
                log.exception("observing the workloads KEDA asks about failed")
