"""Files named by start-up flags, read so that a wrong one is one line naming the flag and never a hang.

A flag may point at something that is not a file at all: a FIFO (opening it for reading blocks until a writer comes),
`/dev/zero` or `/dev/urandom` (endless), a directory, or a file far larger than any configuration. `read_input_file`
opens without blocking, accepts regular files only (Kubernetes mounts ConfigMaps and Secrets as symlinks to regular
files, which are followed) and reads at most a cap. TLS keys are loaded by OpenSSL, which prompts on the terminal for
the passphrase of an encrypted key unless told otherwise: `refuse_passphrase` tells it otherwise.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

# A configuration, scenario, kubeconfig or measurement list is a few KB; this leaves room for a thousand times that.
MAX_INPUT_BYTES = 4 * 1024 * 1024


class InputFileError(ValueError):
    """A file named by a flag that cannot be used, as one line naming the flag."""


def read_input_file(path: Path, flag: str, *, max_bytes: int = MAX_INPUT_BYTES) -> bytes:
    """The bytes of the regular file at `path`, at most `max_bytes` of them; InputFileError otherwise."""
    where = f"{flag} {path}"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except OSError as error:
        raise InputFileError(f"{where}: cannot read: {error.strerror or error}") from None
    kind = os.fstat(fd).st_mode
    if not stat.S_ISREG(kind):
        os.close(fd)
        raise InputFileError(f"{where}: not a regular file (a {_kind(kind)})")
    with os.fdopen(fd, "rb") as file:
        try:
            data = file.read(max_bytes + 1)
        except OSError as error:
            raise InputFileError(f"{where}: cannot read: {error.strerror or error}") from None
    if len(data) > max_bytes:
        raise InputFileError(f"{where}: larger than {max_bytes} bytes")
    return data


def read_input_text(path: Path, flag: str, *, max_bytes: int = MAX_INPUT_BYTES) -> str:
    """`read_input_file`, as UTF-8 text (a byte-order mark is dropped)."""
    try:
        return read_input_file(path, flag, max_bytes=max_bytes).decode("utf-8-sig")
    except UnicodeDecodeError:
        raise InputFileError(f"{flag} {path}: not a UTF-8 text file") from None


def refuse_passphrase(flag: str, path: Path) -> Callable[[], str]:
    """A `password` for `SSLContext.load_cert_chain`: a key protected by a passphrase is an error naming `flag`,
    not a prompt on the terminal."""

    def refuse() -> str:
        raise InputFileError(f"{flag} {path}: the key is protected by a passphrase; give an unencrypted key")

    return refuse


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "directory"
    if stat.S_ISFIFO(mode):
        return "FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device"
    if stat.S_ISSOCK(mode):
        return "socket"
    return "special file"
