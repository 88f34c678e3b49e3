"""Reading an upstream's answer (an exporter's `/pods`, a Prometheus query) without trusting it.

The body is read in chunks and refused as soon as it passes the cap, whether or not the answer states a
`Content-Length`: a chunked body of unbounded length costs at most the cap (and the decompressed size is what counts,
since aiohttp inflates as it reads). JSON is decoded here too, so that a document nested deeper than the decoder's
recursion limit is "not JSON" like any other bad body, not a RecursionError.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable

import aiohttp

READ_CHUNK_BYTES = 64 * 1024


class UpstreamAnswerError(ValueError):
    """An answer that cannot be used (too large, not JSON), as one line."""


async def read_bounded(
    response: aiohttp.ClientResponse, limit: int, grown: Callable[[int], Awaitable[None]] | None = None
) -> bytes:
    """The whole body, or UpstreamAnswerError once more than `limit` bytes have arrived (or are announced). `grown`,
    when given, is awaited with the size read so far after each chunk (it may wait before more is read)."""
    if response.content_length is not None and response.content_length > limit:
        raise UpstreamAnswerError(f"the answer announces {response.content_length} bytes, more than {limit}")
    body = bytearray()
    async for chunk in response.content.iter_chunked(READ_CHUNK_BYTES):
        body += chunk
        if len(body) > limit:
            raise UpstreamAnswerError(f"the answer is larger than {limit} bytes")
        if grown is not None:
            await grown(len(body))
    return bytes(body)


def decode_json(body: bytes) -> object:
    """The JSON value in `body`; UpstreamAnswerError when it is not JSON (or nested too deep to decode)."""
    try:
        return json.loads(body)
    except RecursionError:
        raise UpstreamAnswerError("the answer is JSON nested too deep") from None
    except ValueError as exc:  # includes UnicodeDecodeError
        raise UpstreamAnswerError(f"the answer is not JSON: {exc}") from None
