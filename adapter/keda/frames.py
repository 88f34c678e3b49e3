"""What one client's HTTP/2 connection to the KEDA port may cost, read from its frames as they pass (plain data).

grpc core, which serves the port's calls, has no bound on the rate of stream resets or SETTINGS frames a connection
sends (docs/security.md, "KEDA port"): a rapid reset flood (CVE-2023-44487, HEADERS then RST_STREAM at once, over and
over) or a SETTINGS flood costs it a core and is never cut off. The port's front (keda/front.py) therefore reads each
frame's 9-byte header (RFC 9113 section 4.1; payloads are skipped, not parsed) and charges two token buckets:

- stream resets: 1,000 at once, then 33 a second, nghttp2's defaults for the same attack
  (`nghttp2_option_set_stream_reset_rate_limit`, nghttp2 1.57.0's fix for CVE-2023-44487);
- SETTINGS frames (not their acknowledgements): 100 at once, then 10 a second. Each obliges the server to answer
  (RFC 9113 section 6.5.3); a gRPC client sends one after the preface and one each time its flow-control window
  grows (grpc-go's BDP estimator), a few in a connection's life.

Past either, the connection is closed with GOAWAY `ENHANCE_YOUR_CALM` (RFC 9113 section 7), as nghttp2 does. The
client's preface must be the connection preface followed by a SETTINGS frame (RFC 9113 section 3.4), else the
connection is closed as not HTTP/2. PING floods are grpc core's to close (`grpc.http2.max_ping_strikes`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
FRAME_HEADER_BYTES = 9
# frame types and flags (RFC 9113 section 6)
HEADERS = 0x1
RST_STREAM = 0x3
SETTINGS = 0x4
GOAWAY = 0x7
ACK = 0x1
ENHANCE_YOUR_CALM = 0xB  # error code (RFC 9113 section 7)
PROTOCOL_ERROR = 0x1
_STREAM_ID_MASK = 0x7FFF_FFFF  # the reserved bit is ignored (RFC 9113 section 4.1)


@dataclass(frozen=True, slots=True)
class FrameLimits:
    """The buckets' sizes (burst) and refill rates (a second)."""

    reset_burst: int = 1000
    reset_rate: float = 33.0
    settings_burst: int = 100
    settings_rate: float = 10.0


@dataclass(frozen=True, slots=True)
class Breach:
    """Why a connection must be closed: the `budget` spent (`resets`, `settings`; `preface`: not HTTP/2), in a line."""

    budget: str
    message: str


class TokenBucket:
    """`burst` tokens at first and at most, `rate` more a second; `take` spends one, False when none is left."""

    __slots__ = ("_burst", "_rate", "_stamp", "_tokens")

    def __init__(self, burst: int, rate: float, now: float) -> None:
        self._burst, self._rate = float(burst), rate
        self._tokens, self._stamp = float(burst), now

    def take(self, now: float) -> bool:
        self._tokens = min(self._burst, self._tokens + max(0.0, now - self._stamp) * self._rate)
        self._stamp = now
        if self._tokens < 1.0:
            return False
        self._tokens -= 1.0
        return True


class FrameMeter:
    """One client's byte stream, fed as it arrives: `feed` answers None while the connection is within its budgets,
    else the Breach it must be closed for. It keeps the highest stream the client opened (for GOAWAY)."""

    def __init__(self, limits: FrameLimits | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        limits = limits or FrameLimits()
        self._limits = limits
        self._clock = clock
        now = clock()
        self._resets = TokenBucket(limits.reset_burst, limits.reset_rate, now)
        self._settings = TokenBucket(limits.settings_burst, limits.settings_rate, now)
        self._preface_seen = 0  # bytes of the preface read so far
        self._header = b""  # a frame header split across reads
        self._skip = 0  # payload bytes of the current frame still to pass
        self.frames = 0
        self.last_stream_id = 0

    def feed(self, data: bytes) -> Breach | None:
        at = 0
        if self._preface_seen < len(PREFACE):
            expected = PREFACE[self._preface_seen : self._preface_seen + len(data)]
            if data[: len(expected)] != expected:
                return Breach("preface", "not HTTP/2: the connection does not open with the client preface")
            self._preface_seen += len(expected)
            at = len(expected)
        end = len(data)
        while at < end:
            if self._skip:
                step = min(self._skip, end - at)
                self._skip -= step
                at += step
                continue
            wanted = FRAME_HEADER_BYTES - len(self._header)
            self._header += data[at : at + wanted]
            at += wanted
            if len(self._header) < FRAME_HEADER_BYTES:
                break
            header, self._header = self._header, b""
            self._skip = int.from_bytes(header[0:3], "big")
            problem = self._charge(header[3], header[4], int.from_bytes(header[5:9], "big") & _STREAM_ID_MASK)
            if problem is not None:
                return problem
        return None

    def _charge(self, kind: int, flags: int, stream: int) -> Breach | None:
        self.frames += 1
        if self.frames == 1 and kind != SETTINGS:
            return Breach("preface", "not HTTP/2: the client preface is not followed by a SETTINGS frame")
        if kind == HEADERS:
            self.last_stream_id = max(self.last_stream_id, stream)
        elif kind == RST_STREAM:
            if not self._resets.take(self._clock()):
                limits = self._limits
                return Breach(
                    "resets", f"stream resets past {limits.reset_burst} at once and {limits.reset_rate:g} a second"
                )
        elif kind == SETTINGS and not flags & ACK:
            if not self._settings.take(self._clock()):
                limits = self._limits
                return Breach(
                    "settings",
                    f"SETTINGS frames past {limits.settings_burst} at once and {limits.settings_rate:g} a second",
                )
        return None


def complete_frames(buffer: bytes | bytearray) -> int:
    """How many leading bytes of `buffer` (a server's frames, no preface) are whole frames."""
    at, end = 0, len(buffer)
    while at + FRAME_HEADER_BYTES <= end:
        length = int.from_bytes(buffer[at : at + 3], "big")
        if at + FRAME_HEADER_BYTES + length > end:
            break
        at += FRAME_HEADER_BYTES + length
    return at


def goaway(last_stream_id: int, error_code: int, debug: bytes = b"") -> bytes:
    """A GOAWAY frame (RFC 9113 section 6.8): the last stream the server may have acted on, an error code, and
    `debug` data for the peer's logs."""
    payload = (last_stream_id & _STREAM_ID_MASK).to_bytes(4, "big") + error_code.to_bytes(4, "big") + debug
    return len(payload).to_bytes(3, "big") + bytes((GOAWAY, 0)) + (0).to_bytes(4, "big") + payload
