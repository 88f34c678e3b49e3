"""The sockets a server really holds, read from the kernel: not from the server's own books."""

from __future__ import annotations

from pathlib import Path

_LISTEN = "0A"


def server_sockets(port: int) -> int:
    """TCP sockets on local `port` (any address) that a process still holds, the listening one aside.

    /proc/net/tcp and tcp6 list every TCP socket the kernel keeps; one whose process closed it (an orphan in FIN_WAIT
    or LAST_ACK, or TIME_WAIT) has inode 0, so a non-zero inode is a file descriptor still open somewhere. Clients in
    the same process connect from other local ports and are not counted.
    """
    held = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        path = Path(table)
        if not path.exists():
            continue
        for line in path.read_text().splitlines()[1:]:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if int(local.rpartition(":")[2], 16) == port and state != _LISTEN and inode != "0":
                held += 1
    return held
