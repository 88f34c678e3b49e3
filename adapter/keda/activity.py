"""Whether a workload is active, with hysteresis: a pure step from one observation to the next state.

KEDA scales a workload to zero once its triggers have been inactive for the ScaledObject's `cooldownPeriod`, and from
zero when one becomes active. A GPU figure is noisy (a request arrives, a batch ends), so the state changes only when
an observation has held long enough:

- inactive -> active once some pod's value has exceeded the activation target for `activate_after` seconds (default 0:
  at once; an idle workload that gets work is woken without delay);
- active -> inactive once no pod's value has exceeded it for `deactivate_after` seconds (default 60): one quiet second,
  or a minute of short pauses, does not start KEDA's countdown to zero.

What cannot be observed changes nothing: while the pods have no fresh figure, or the source cannot answer, the state
holds and both countdowns start again. A workload with no pods at all is quiet (there is nothing to be busy).

The first observation of a workload has no history. Busy: active. No pods: inactive. Quiet pods: active, counting
the quiet time from now, so that an adapter that restarts (or a second replica KEDA reaches) never declares a workload
idle sooner than one that watched it all along. Nothing waiting at a gateway (a demand trigger): inactive, as
no pods (a queue read at the gateway is the demand itself, not a noisy pod figure). Nothing known yet (no figures):
unknown, which the API reports as an error rather than guess.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace


class Observation(enum.Enum):
    BUSY = "busy"  # some selected pod's value exceeds the activation target
    QUIET = "quiet"  # the selected pods have figures, none above the activation target
    NO_PODS = "no_pods"  # no pod is selected
    NOTHING_WAITING = "nothing_waiting"  # a demand trigger's gateway holds no more than the activation target
    UNKNOWN = "unknown"  # pods are selected but none has a fresh figure, or the source cannot answer


@dataclass(frozen=True, slots=True)
class ActivityState:
    """`active`: None until the first known observation. `busy_since` / `quiet_since`: start of the current unbroken
    run of busy / quiet (or no-pods) observations, None when the last observation was not one."""

    active: bool | None = None
    busy_since: float | None = None
    quiet_since: float | None = None


UNKNOWN_STATE = ActivityState()


@dataclass(frozen=True, slots=True)
class Hysteresis:
    activate_after: float = 0.0
    deactivate_after: float = 60.0

    def __post_init__(self) -> None:
        if self.activate_after < 0 or self.deactivate_after < 0:
            raise ValueError("activation delays must be 0 or more seconds")

    def step(self, state: ActivityState, seen: Observation, now: float) -> ActivityState:
        """The state after observing `seen` at `now`."""
        if seen is Observation.UNKNOWN:
            return replace(state, busy_since=None, quiet_since=None)
        if seen is Observation.BUSY:
            since = state.busy_since if state.busy_since is not None else now
            active = state.active is None or state.active or now - since >= self.activate_after
            return ActivityState(active, since, None)
        since = state.quiet_since if state.quiet_since is not None else now
        if state.active is None:
            active = seen is Observation.QUIET  # quiet pods: active until they have been quiet long enough
        else:
            active = state.active
        if active and now - since >= self.deactivate_after:
            active = False
        return ActivityState(active, None, since)
