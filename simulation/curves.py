"""Smooth load curves: a baseline, a few sine waves and a little seeded 'noise' (faster, smaller sines).

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


class LoadCurve(BaseModel):
    """Utilization in percent over time: baseline + waves + noise, clamped to 0-100."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    baseline: float = Field(default=0.0, ge=0, le=100)
    waves: tuple[Wave, ...] = ()
    noise: float = Field(default=0.0, ge=0, le=50, description="amplitude of the seeded wobble, percentage points")

    def compile(self, seed_key: str) -> Curve:
        rng = random.Random(seed_key)
        terms = [(w.amplitude, TAU / w.period_s, TAU * w.phase) for w in self.waves]
        if self.noise > 0:
            for _ in range(NOISE_WAVES):
                period = rng.uniform(4.0, 40.0)
                terms.append((self.noise / NOISE_WAVES, TAU / period, rng.uniform(0.0, TAU)))
        return Curve(self.baseline, tuple(terms))


IDLE = LoadCurve()


@dataclass(frozen=True, slots=True)
class Curve:
    """A compiled LoadCurve: call it with seconds since scenario start."""

    baseline: float
    terms: tuple[tuple[float, float, float], ...]  # (amplitude, angular frequency, phase in radians)

    def __call__(self, t: float) -> float:
        v = self.baseline
        for amplitude, omega, phase in self.terms:
            v += amplitude * math.sin(omega * t + phase)
        if v < 0.0:
            return 0.0
        return 100.0 if v > 100.0 else v


def constant(percent: float) -> Curve:
    return Curve(min(100.0, max(0.0, percent)), ())
