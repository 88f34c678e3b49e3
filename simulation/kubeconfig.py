"""Kubeconfig files: written for tests and the demo (a client certificate or a token for one server)."""

from __future__ import annotations

import base64
from pathlib import Path

import yaml

from toolkit.certs import write_private


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def write_kubeconfig(
    path: Path,
    *,
    server: str,
    ca_pem: bytes | None = None,
    client_cert_pem: bytes | None = None,
    client_key_pem: bytes | None = None,
    token: str | None = None,
    name: str = "gpu-pulse",
) -> Path:
    """A kubeconfig with one cluster, user and context (the current one), credentials embedded. Mode 0600."""
    if (client_cert_pem is None) != (client_key_pem is None):
        raise ValueError("a client certificate needs its key, and the other way round")
    cluster: dict[str, object] = {"server": server}
    if ca_pem is not None:
        cluster["certificate-authority-data"] = _b64(ca_pem)
    user: dict[str, object] = {}
    if client_cert_pem is not None and client_key_pem is not None:
        user["client-certificate-data"] = _b64(client_cert_pem)
        user["client-key-data"] = _b64(client_key_pem)
    if token is not None:
        user["token"] = token
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": cluster}],
        "users": [{"name": name, "user": user}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
        "current-context": name,
        "preferences": {},
    }
    write_private(path, yaml.safe_dump(document, sort_keys=False).encode())
    return path
