"""Ask TLS clients for a certificate without verifying it in the handshake, as kube-apiserver does.

kube-apiserver requests a client certificate but leaves its verification to the authenticators
(kubernetes/apiserver pkg/server/secure_serving.go: `tlsConfig.ClientAuth = tls.RequestClientCert`; the x509 and
requestheader authenticators verify it against the current CA bundles). So a certificate from an unknown CA is a 401
`Unauthorized`, not a failed handshake, and a CA bundle can change without touching the listener.

Python's `ssl` has no such mode: `CERT_NONE` never asks for a certificate, and `CERT_OPTIONAL` (OpenSSL's
SSL_VERIFY_PEER) fails the handshake when the presented chain does not verify against the loaded CAs; `ssl` exposes no
verify callback, and `SSLObject.get_unverified_chain()` is public only from Python 3.13 (3.11 has it on the private
`_sslobj`) and would not help: it reads a chain after a handshake that `CERT_OPTIONAL` has already failed. OpenSSL
itself has the mode: SSL_VERIFY_PEER with a verify callback that accepts every chain. The proof of possession (the
client's CertificateVerify signature) is checked by OpenSSL whatever the callback says, so the peer certificate a
handler reads is still one whose key the client holds; only the chain is left to the caller.

`request_unverified_client_certificates(context)` installs that callback on the context's SSL_CTX through ctypes. It
finds the SSL_CTX pointer where CPython's `_ssl` keeps it (the first field after the object header) and uses it only
after two checks that it is one (OpenSSL reports the verify mode and the options the Python object holds); when
anything does not match, it changes nothing and returns False, and the caller keeps TLS-level verification.
"""

from __future__ import annotations

import ctypes
import logging
import ssl
from typing import Any

log = logging.getLogger(__name__)

_SSL_VERIFY_PEER = 0x01
_VerifyCallback = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_void_p)


def _accept_every_chain(preverify_ok: int, store: int | None) -> int:
    if not preverify_ok and _clear_errors is not None:
        # OpenSSL leaves the reason on its thread's error queue (a signature that does not verify: "[ASN1] EVP lib");
        # ignored here, it would fail the next read of the connection, and the client would see it dropped instead of
        # answered 401 (issue 21, item 9)
        _clear_errors()
    return 1  # the chain is verified by the authenticators, against the CA bundles they hold right now


_clear_errors: Any = None  # OpenSSL's ERR_clear_error, once the callback is installed


_ACCEPT = _VerifyCallback(_accept_every_chain)  # kept for the life of the process: OpenSSL calls it


def _openssl() -> Any:
    library = ctypes.CDLL(ssl._ssl.__file__)  # type: ignore[attr-defined]  # resolves libssl's symbols too
    library.SSL_CTX_get_verify_mode.argtypes = [ctypes.c_void_p]
    library.SSL_CTX_get_verify_mode.restype = ctypes.c_int
    library.SSL_CTX_get_options.argtypes = [ctypes.c_void_p]
    library.SSL_CTX_get_options.restype = ctypes.c_uint64
    library.SSL_CTX_set_verify.argtypes = [ctypes.c_void_p, ctypes.c_int, _VerifyCallback]
    library.SSL_CTX_set_verify.restype = None
    library.ERR_clear_error.argtypes = []
    library.ERR_clear_error.restype = None
    return library


def request_unverified_client_certificates(context: ssl.SSLContext) -> bool:
    """Make `context` ask for a client certificate and accept any chain (see the module docstring).

    True when installed; False (nothing changed, a warning logged) when this Python or OpenSSL does not allow it.
    The server's own certificate, ciphers and protocol versions are untouched.
    """
    try:
        library = _openssl()
        context.verify_mode = ssl.CERT_OPTIONAL  # SSL_VERIFY_PEER: the server sends a CertificateRequest
        pointer = ctypes.c_void_p.from_address(id(context) + object.__basicsize__).value
        if (
            not pointer
            or library.SSL_CTX_get_verify_mode(pointer) != _SSL_VERIFY_PEER
            or library.SSL_CTX_get_options(pointer) != int(context.options)
        ):
            log.warning("cannot reach this Python's OpenSSL context: client certificates are verified in the handshake")
            return False
        global _clear_errors
        _clear_errors = library.ERR_clear_error
        library.SSL_CTX_set_verify(pointer, _SSL_VERIFY_PEER, _ACCEPT)
    except (OSError, AttributeError, ValueError) as error:
        log.warning("client certificates are verified in the handshake (%s: %s)", type(error).__name__, error)
        return False
    return True
