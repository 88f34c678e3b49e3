"""Smooth load curves: a baseline, a few sine waves and a little seeded 'noise' (faster, smaller sines); optionally
a cycle of named phases, each holding its own baseline for a while (a demo's traffic story: quiet, burst, moderate).

A curve is a pure function of scenario time, so every value the simulator reports is reproducible for a seed, and a
graph of it looks like a real workload (slow swings, some wobble) rather than white noise.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

TAU = 2.0 * math.pi
NOISE_WAVES = 3


class Wave(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    amplitude: float = Field(ge=0, description="percentage points")
    period_s: float = Field(gt=0)
    phase: float = Field(default=0.0, description="fraction of a period, 0-1")


class Phase(BaseModel):
    """One phase of a cycle: its level replaces the curve's baseline for `duration_s`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1, max_length=60)
    duration_s: float = Field(gt=0)
    level: float = Field(ge=0, le=100)


def phase_at(phases: tuple[Phase, ...], t: float) -> Phase | None:
    """The phase of the cycle `phases` (repeated from time 0) at time `t`; None without phases."""
    if not phases:
        return None
    at = t % sum(p.duration_s for p in phases) if t > 0 else 0.0
    for phase in phases:
        if at < phase.duration_s:
            return phase
        at -= phase.duration_s
    return phases[-1]  # rounding at the cycle's end


class LoadCurve(BaseModel):
    """Utilization in percent over time: baseline (or the current phase's level) + waves + noise, clamped to 0-100."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    baseline: float = Field(default=0.0, ge=0, le=100)
    waves: tuple[Wave, ...] = ()
    noise: float = Field(default=0.0, ge=0, le=50, description="amplitude of the seeded wobble, percentage points")
    phases: tuple[Phase, ...] = Field(
        default=(), description="a cycle of phases repeated from time 0, each level replacing the baseline in its turn"
    )

    def compile(self, seed_key: str) -> Curve:
        rng = random.Random(seed_key)
        terms = [(w.amplitude, TAU / w.period_s, TAU * w.phase) for w in self.waves]
        if self.noise > 0:
            for _ in range(NOISE_WAVES):
                period = rng.uniform(4.0, 40.0)
                terms.append((self.noise / NOISE_WAVES, TAU / period, rng.uniform(0.0, TAU)))
        return Curve(self.baseline, tuple(terms), self.phases)


IDLE = LoadCurve()


@dataclass(frozen=True, slots=True)
class Curve:
    """A compiled LoadCurve: call it with seconds since scenario start."""

    baseline: float
    terms: tuple[tuple[float, float, float], ...]  # (amplitude, angular frequency, phase in radians)
    phases: tuple[Phase, ...] = ()

    def __call__(self, t: float) -> float:
        current = phase_at(self.phases, t)
        v = self.baseline if current is None else current.level
        for amplitude, omega, phase in self.terms:
            v += amplitude * math.sin(omega * t + phase)
        if v < 0.0:
            return 0.0
        return 100.0 if v > 100.0 else v


def constant(percent: float) -> Curve:
    return Curve(min(100.0, max(0.0, percent)), ())
