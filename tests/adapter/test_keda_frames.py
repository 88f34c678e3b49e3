"""The KEDA port's frame meter (adapter/keda/frames.py): frame headers read across any split of the byte stream, the
two budgets (stream resets, SETTINGS) spent and refilled, and the frames the front writes, read back by hyperframe
(h2's frame layer) as the referee."""

from __future__ import annotations

import itertools

import hyperframe.frame
from hypothesis import given
from hypothesis import strategies as st

from adapter.keda.frames import (
    ACK,
    ENHANCE_YOUR_CALM,
    HEADERS,
    PREFACE,
    RST_STREAM,
    SETTINGS,
    Breach,
    FrameLimits,
    FrameMeter,
    TokenBucket,
    complete_frames,
    goaway,
)
from tests.support.clocks import ManualClock

DATA, PING, WINDOW_UPDATE = 0x0, 0x6, 0x8


def frame(kind: int, stream: int = 0, payload: bytes = b"", flags: int = 0) -> bytes:
    return len(payload).to_bytes(3, "big") + bytes((kind, flags)) + stream.to_bytes(4, "big") + payload


OPENING = PREFACE + frame(SETTINGS, payload=bytes(6))
frames = st.lists(
    st.builds(
        frame,
        st.sampled_from([DATA, HEADERS, PING, WINDOW_UPDATE, SETTINGS, RST_STREAM]),
        st.integers(0, 2**31 - 1),
        st.binary(max_size=40),
        st.sampled_from([0, ACK]),
    ),
    max_size=30,
)


def splits(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({0, len(data), *(c % (len(data) + 1) for c in cuts)})
    return [data[a:b] for a, b in itertools.pairwise(points)]


@given(frames, st.lists(st.integers(min_value=0), max_size=20))
def test_the_verdict_and_the_count_do_not_depend_on_how_the_stream_is_split(sent: list[bytes], cuts: list[int]) -> None:
    stream = OPENING + b"".join(sent)
    whole = FrameMeter(FrameLimits(reset_burst=3, settings_burst=3), ManualClock())
    verdict = whole.feed(stream)
    pieces = FrameMeter(FrameLimits(reset_burst=3, settings_burst=3), ManualClock())
    verdicts = [pieces.feed(piece) for piece in splits(stream, cuts)]
    assert next((v for v in verdicts if v is not None), None) == verdict
    if verdict is None:
        assert pieces.frames == whole.frames == 1 + len(sent)
        opened = [int.from_bytes(f[5:9], "big") & 0x7FFF_FFFF for f in sent if f[3] == HEADERS]
        assert pieces.last_stream_id == whole.last_stream_id == max(opened, default=0)


def test_resets_past_the_burst_close_the_connection_and_the_rate_refills_it() -> None:
    clock = ManualClock()
    meter = FrameMeter(FrameLimits(reset_burst=1000, reset_rate=33), clock)
    assert meter.feed(OPENING) is None
    reset = frame(HEADERS, 1) + frame(RST_STREAM, 1, bytes(4))
    assert meter.feed(reset * 1000) is None
    assert meter.feed(reset) == Breach("resets", "stream resets past 1000 at once and 33 a second")

    paced = FrameMeter(FrameLimits(reset_burst=1000, reset_rate=33), clock)
    paced.feed(OPENING)
    for _ in range(5000):  # KEDA cancelling calls at the refill rate, forever
        clock.advance(1 / 33)
        assert paced.feed(reset) is None


def test_settings_frames_are_charged_and_their_acknowledgements_are_not() -> None:
    meter = FrameMeter(FrameLimits(settings_burst=100, settings_rate=10), ManualClock())
    assert meter.feed(OPENING) is None  # the preface's SETTINGS is the first of the 100
    assert meter.feed(frame(SETTINGS, flags=ACK) * 10_000) is None
    assert meter.feed(frame(SETTINGS) * 99) is None
    assert meter.feed(frame(SETTINGS)) == Breach("settings", "SETTINGS frames past 100 at once and 10 a second")


def test_a_connection_that_is_not_http2_is_refused_at_once() -> None:
    assert FrameMeter().feed(b"GET / HTTP/1.1\r\n") is not None
    assert FrameMeter().feed(PREFACE[:10]) is None
    assert FrameMeter().feed(PREFACE + frame(HEADERS, 1)) == Breach(
        "preface", "not HTTP/2: the client preface is not followed by a SETTINGS frame"
    )


@given(st.integers(1, 50), st.floats(0.1, 100), st.lists(st.floats(0, 10), max_size=60))
def test_a_bucket_never_gives_more_than_its_burst_and_its_rate(burst: int, rate: float, gaps: list[float]) -> None:
    clock = ManualClock()
    bucket = TokenBucket(burst, rate, clock())
    given_out = 0
    for gap in gaps:
        clock.advance(gap)
        given_out += bucket.take(clock())
    assert given_out <= burst + rate * sum(gaps) + 1e-6


@given(frames, st.integers(min_value=0))
def test_complete_frames_stops_at_the_last_whole_frame(sent: list[bytes], cut: int) -> None:
    stream = b"".join(sent)
    cut %= len(stream) + 1
    boundaries = [sum(len(f) for f in sent[:i]) for i in range(len(sent) + 1)]
    assert complete_frames(stream[:cut]) == max(b for b in boundaries if b <= cut)


@given(st.integers(0, 2**31 - 1), st.binary(max_size=200))
def test_goaway_is_a_frame_h2_reads_back(last_stream_id: int, debug: bytes) -> None:
    written = goaway(last_stream_id, ENHANCE_YOUR_CALM, debug)
    parsed, length = hyperframe.frame.Frame.parse_frame_header(memoryview(written[:9]))
    parsed.parse_body(memoryview(written[9 : 9 + length]))
    assert isinstance(parsed, hyperframe.frame.GoAwayFrame)
    assert (parsed.last_stream_id, parsed.error_code, parsed.additional_data) == (
        last_stream_id,
        ENHANCE_YOUR_CALM,
        debug,
    )
    assert complete_frames(written) == len(written)
