"""The demo's trust: a CA of its own, the serving certificates of the adapter and of the Kubernetes API stand-in, the
demo user's client certificate, the aggregator's proxy client certificate (the stand-in presents it to the adapter,
as kube-apiserver presents its --proxy-client-cert-file), and the kubeconfig that hands the user's to kubectl.

The kubeconfig is written only once the adapter serves, and removed when the demo stops, so its appearance means
"ready". A file at that path that is not a demo kubeconfig is never overwritten.
"""

from __future__ import annotations

import contextlib
import ipaddress
from dataclasses import dataclass
from pathlib import Path

import yaml

from simulation.kubeconfig import write_kubeconfig
from toolkit.certs import CertificateAuthority, IssuedCertificate, write_atomically
from toolkit.settings import ListenAddress

KUBECONFIG_NAME = "gpu-pulse-demo"
PROXY_CLIENT = "front-proxy-client"


class KubeconfigInUseError(ValueError):
    """The kubeconfig path holds a file the demo did not write."""


@dataclass(frozen=True, slots=True)
class DemoTrust:
    ca: CertificateAuthority
    ca_file: Path
    serving_cert: Path
    serving_key: Path
    client: IssuedCertificate
    client_cert: Path
    client_key: Path
    proxy_cert: Path  # CN front-proxy-client: the adapter's --requestheader-allowed-names
    proxy_key: Path
    kube_serving_cert: Path  # the stand-in's, for 127.0.0.1 and localhost
    kube_serving_key: Path


def serving_hostnames(listen: ListenAddress) -> list[str]:
    """The names a client may use for the adapter: the listen host (unless it is "any") and loopback."""
    names = ["127.0.0.1", "localhost", "::1"]
    try:
        unspecified = ipaddress.ip_address(listen.host).is_unspecified
    except ValueError:
        unspecified = False
    return names if unspecified else [listen.host, *names]


def server_url(listen: ListenAddress, port: int) -> str:
    """The URL kubectl is given: the listen host, or loopback when the adapter listens on every address."""
    host = listen.host
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return f"https://{host}:{port}"
    if address.is_unspecified:
        return f"https://127.0.0.1:{port}" if address.version == 4 else f"https://[::1]:{port}"
    return f"https://[{host}]:{port}" if address.version == 6 else f"https://{host}:{port}"


def create_trust(workdir: Path, listen: ListenAddress, user: str, groups: tuple[str, ...]) -> DemoTrust:
    ca = CertificateAuthority.create("gpu-pulse-demo-ca")
    ca_file = workdir / "ca.crt"
    write_atomically(ca_file, ca.cert_pem, mode=0o644)
    serving = ca.issue_server(serving_hostnames(listen), common_name="gpu-pulse-adapter")
    serving.write(workdir / "serving.crt", workdir / "serving.key")
    client = ca.issue_client(user, groups)
    client.write(workdir / "client.crt", workdir / "client.key")
    ca.issue_client(PROXY_CLIENT, ()).write(workdir / "proxy.crt", workdir / "proxy.key")
    ca.issue_server(["127.0.0.1", "localhost"], common_name="kube-apiserver").write(
        workdir / "kube.crt", workdir / "kube.key"
    )
    return DemoTrust(
        ca, ca_file, workdir / "serving.crt", workdir / "serving.key", client, workdir / "client.crt",
        workdir / "client.key", workdir / "proxy.crt", workdir / "proxy.key", workdir / "kube.crt",
        workdir / "kube.key",
    )  # fmt: skip


def is_demo_kubeconfig(path: Path) -> bool:
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return False
    return isinstance(document, dict) and document.get("current-context") == KUBECONFIG_NAME


def clear_kubeconfig_path(path: Path) -> None:
    """Remove a demo kubeconfig left by an earlier run (its server is gone); refuse anything else, and a path whose
    directory does not exist (the demo creates nothing it would leave behind)."""
    if path.is_dir():
        raise KubeconfigInUseError(f"{path} is a directory: give a file path for the demo's kubeconfig")
    if not path.parent.is_dir():
        raise KubeconfigInUseError(f"the directory {path.parent} does not exist: create it, or name a file elsewhere")
    if not path.exists():
        return
    if not is_demo_kubeconfig(path):
        raise KubeconfigInUseError(f"{path} exists and is not a gpu-pulse demo kubeconfig: not overwriting it")
    path.unlink()


def write_demo_kubeconfig(path: Path, server: str, trust: DemoTrust) -> Path:
    return write_kubeconfig(
        path,
        server=server,
        ca_pem=trust.ca.cert_pem,
        client_cert_pem=trust.client.cert_pem,
        client_key_pem=trust.client.key_pem,
        name=KUBECONFIG_NAME,
    )


def remove_demo_kubeconfig(path: Path) -> None:
    if is_demo_kubeconfig(path):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
