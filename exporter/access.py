"""Who may read the exporter: anyone (the default of the program itself), the holders of a shared bearer token
(`--auth-bearer-token-file`), users with passwords (`--auth-basic-file`), or Kubernetes identities whose tokens the
cluster vouches for (`--auth-allowed-users`, the default of the Helm chart and the kustomize manifests).

The last is how the adapter proves itself without a shared secret: it presents its projected ServiceAccount token, made
for the audience `--auth-token-audience` (so the exporter cannot replay it against the API server, nor anything else
against the exporter), and re-read as the kubelet rotates it; the exporter asks the cluster by TokenReview who it is
(cached, off the event loop: toolkit/tokenreview.py) and serves `/pods` only to the users listed. `/metrics` and the
page stay open, for Prometheus and for people, behind the NetworkPolicy: the identity check guards the adapter's feed,
so that no other client can take the `/pods` stream slots the adapter needs (issue 21).

A token that is not visible ASCII (`Authorization: Bearer \\xe9`, which aiohttp decodes with surrogates) is a refused
token (401), never an error.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import logging
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from toolkit.inputfiles import read_input_text
from toolkit.tokenreview import ReviewedUser, TokenReviewer, TokenReviewUnavailableError

log = logging.getLogger(__name__)

ALL_PATHS = frozenset({"/metrics", "/pods", "/"})
FEED_PATHS = frozenset({"/pods"})  # what only the allowed identities read when they are checked by TokenReview
MAX_SECRET_FILE_BYTES = 1024 * 1024  # a token or a list of users is a few KB
DEFAULT_TOKEN_AUDIENCE = "gpu-pulse-exporter"


@dataclass(frozen=True, slots=True)
class Decision:
    status: int  # 200: allowed; 401: no valid credentials; 403: valid, but not allowed here
    user: str = ""  # who asks, where the credentials name someone


ALLOWED = Decision(200)
UNAUTHENTICATED = Decision(401)


class Access(Protocol):
    @property
    def challenge(self) -> str:
        """The WWW-Authenticate value of a 401."""
        ...

    @property
    def protected(self) -> frozenset[str]:
        """The paths that need credentials."""
        ...

    async def decide(self, authorization: str | None) -> Decision: ...


def _digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).digest()


def _credentials(authorization: str | None, scheme: str) -> str | None:
    """The credentials of an `Authorization` header of `scheme`, when they are visible ASCII; else None."""
    given, _, credentials = (authorization or "").strip().partition(" ")
    credentials = credentials.strip()
    if given.lower() != scheme or not credentials or not credentials.isascii() or not credentials.isprintable():
        return None
    return credentials


@dataclass(frozen=True, slots=True)
class BearerAccess:
    token_digest: bytes
    challenge: str = 'Bearer realm="gpu-pulse"'
    protected: frozenset[str] = ALL_PATHS

    async def decide(self, authorization: str | None) -> Decision:
        token = _credentials(authorization, "bearer")
        # compare even without a token, so the time taken does not tell what was wrong
        matches = hmac.compare_digest(_digest(token or ""), self.token_digest)
        return ALLOWED if token is not None and matches else UNAUTHENTICATED


@dataclass(frozen=True, slots=True)
class BasicAccess:
    users: Mapping[str, bytes]  # user -> sha256 digest of the password
    challenge: str = 'Basic realm="gpu-pulse", charset="UTF-8"'
    protected: frozenset[str] = ALL_PATHS

    async def decide(self, authorization: str | None) -> Decision:
        encoded = _credentials(authorization, "basic")
        if encoded is None:
            return UNAUTHENTICATED
        try:
            user, sep, password = base64.b64decode(encoded, validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return UNAUTHENTICATED
        expected = self.users.get(user)
        # compare even for an unknown user, so the time taken does not tell which users exist
        matches = hmac.compare_digest(_digest(password), expected if expected is not None else _digest("\0" + user))
        return Decision(200, user) if sep and expected is not None and matches else UNAUTHENTICATED


class TokenReviews(Protocol):
    async def review(self, token: str) -> ReviewedUser | None: ...


class ReviewedAccess:
    """Bearer tokens checked by TokenReview; `/pods` for the users in `allowed` only. A review that cannot be made
    (the API server unreachable) is a 401, as kube-apiserver answers when it cannot authenticate, and a warning in the
    log (one line a second at most: toolkit.logthrottle)."""

    challenge = 'Bearer realm="gpu-pulse"'
    protected = FEED_PATHS

    def __init__(self, reviewer: TokenReviews, allowed: Collection[str]) -> None:
        self._reviewer = reviewer
        self.allowed = frozenset(allowed)

    async def decide(self, authorization: str | None) -> Decision:
        token = _credentials(authorization, "bearer")
        if token is None:
            return UNAUTHENTICATED
        try:
            user = await self._reviewer.review(token)
        except TokenReviewUnavailableError as error:
            log.warning("cannot check a bearer token, answering 401: %s", error)
            return UNAUTHENTICATED
        if user is None:
            return UNAUTHENTICATED
        return Decision(200 if user.name in self.allowed else 403, user.name)


def _read_secret_file(path: Path, flag: str) -> str:
    return read_input_text(path, flag, max_bytes=MAX_SECRET_FILE_BYTES)  # InputFileError is a ValueError


def load_bearer_access(bearer_token_file: Path) -> BearerAccess:
    token = _read_secret_file(bearer_token_file, "--auth-bearer-token-file").strip()
    if not token:
        raise ValueError(f"--auth-bearer-token-file {bearer_token_file}: the file is empty")
    if _credentials(f"Bearer {token}", "bearer") != token:
        raise ValueError(f"--auth-bearer-token-file {bearer_token_file}: a token is visible ASCII without spaces")
    return BearerAccess(_digest(token))


def load_basic_access(basic_file: Path) -> BasicAccess:
    users: dict[str, bytes] = {}
    for number, raw in enumerate(_read_secret_file(basic_file, "--auth-basic-file").splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        user, _, rest = line.partition(":")
        scheme, _, secret = rest.partition(":")
        where = f"--auth-basic-file {basic_file} line {number}"
        if not user or not secret:
            raise ValueError(f"{where}: expected user:sha256:<hex digest> or user:plain:<password>")
        if scheme == "sha256":
            try:
                digest = bytes.fromhex(secret)
            except ValueError:
                digest = b""
            if len(digest) != 32:
                raise ValueError(f"{where}: a sha256 digest is 64 hexadecimal digits")
            users[user] = digest
        elif scheme == "plain":
            users[user] = _digest(secret)
        else:
            raise ValueError(f"{where}: unknown scheme {scheme!r} (expected sha256 or plain)")
    if not users:
        raise ValueError(f"--auth-basic-file {basic_file}: no users in the file")
    return BasicAccess(users)


def load_access(bearer_token_file: Path | None, basic_file: Path | None) -> Access | None:
    """The access check from `--auth-bearer-token-file` or `--auth-basic-file` (None: no auth). ValueError: one line."""
    if bearer_token_file is not None:
        return load_bearer_access(bearer_token_file)
    if basic_file is not None:
        return load_basic_access(basic_file)
    return None


def parse_allowed_users(text: str) -> tuple[str, ...]:
    """`--auth-allowed-users`: comma-separated Kubernetes user names (a ServiceAccount is
    `system:serviceaccount:<namespace>:<name>`); ValueError (one line) when none is given."""
    users = tuple(dict.fromkeys(u.strip() for u in text.split(",") if u.strip()))
    if not users:
        raise ValueError("--auth-allowed-users: give at least one user name")
    return users


def load_reviewed_access(allowed_users: str, audience: str, kubeconfig: Path | None) -> ReviewedAccess:
    """`--auth-allowed-users`, checked by TokenReview through the cluster the exporter runs in (or `--kubeconfig`).
    ValueError (one line) when the Kubernetes API cannot be reached that way."""
    from toolkit.kubeclient import api_client  # the kubernetes client, tens of MB: only when this check is used

    users = parse_allowed_users(allowed_users)
    client = api_client(kubeconfig=kubeconfig, in_cluster_flag="--auth-allowed-users")
    # an allowed token is trusted for a minute (an API server that is away that long does not blind the adapter's
    # reconnects); a refused one is asked again after 10 s
    reviewer = TokenReviewer(client, audiences=(audience,) if audience else (), ttl=60.0, rejected_ttl=10.0)
    return ReviewedAccess(reviewer, users)
