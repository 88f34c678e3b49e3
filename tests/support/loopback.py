"""Loopback networking for tests: sockets bound before anyone is told their port, and plain HTTP GETs.

A port is never picked free and bound later (another test worker can take it in between): an in-process server
serves on a socket already listening (aiohttp's `web.SockSite`), a child process binds port 0 and reports its address
(tests/support/processes.py), and an address that must refuse connections is held bound without listening.
"""

from __future__ import annotations

import socket
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager


def listening_socket(host: str = "127.0.0.1") -> socket.socket:
    """A TCP socket on `host` bound to a port of the kernel's choice and listening; the caller closes it.

    Connections to it queue in the kernel until a server accepts them, so a server can stop and start again on it
    (each on a `dup()` of it) without its address ever being free for someone else."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind((host, 0))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    return sock


def port_of(sock: socket.socket) -> int:
    port: int = sock.getsockname()[1]
    return port


@contextmanager
def refused_port(host: str = "127.0.0.1") -> Iterator[int]:
    """A port on `host` that refuses connections for as long as the block runs: bound (without SO_REUSEADDR, so no
    other socket can bind it meanwhile) and not listening, so the kernel answers a connection with a reset."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        yield port_of(sock)


def http_get(url: str, timeout: float = 2.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        body: bytes = response.read()
        return body
