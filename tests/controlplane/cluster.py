"""A real Kubernetes control plane for a test: gpu-pulse-controlplane (tests/controlplane/go, built by
tests/controlplane/build.py) started as a child process with the certificates a kubeadm cluster has, and the
kubeconfigs and API clients to use it.

What it is given, as kubeadm lays it out (kubernetes/kubernetes cmd/kubeadm/app/phases/controlplane/manifests.go):
one CA for clients and the API server's serving certificate, a separate front-proxy CA with the aggregator's client
certificate (CN front-proxy-client) and the requestheader flags that name it, a service account signing key, RBAC.
The API server binds 127.0.0.1 on a port the kernel picks and its address is read back from the process's log.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from kubernetes import client as k8s

from simulation.kubeconfig import write_kubeconfig
from tests.controlplane.build import NOT_BUILT, build_asked, cached_binary, controlplane_binary
from tests.support.processes import ChildProcesses
from tests.support.waiting import patience
from toolkit.certs import CertificateAuthority, write_private

PROCESS = "controlplane"
SERVING_LINE = r"serving kube-apiserver on (https://[0-9.]+:[0-9]+)"
CONTROLLERS_LINE = r"controllers started"
FRONT_PROXY_USER = "front-proxy-client"
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
# the controllers' sync period in the tests: kube-controller-manager's default is 15 s
HPA_SYNC_PERIOD_S = 2
# none: HPAScaleToZero (minReplicas 0 with an Object or External metric) is beta and on from 1.37
# (kubernetes/kubernetes pkg/features/kube_features.go)
FEATURE_GATES = ""


@dataclass(frozen=True)
class ControlPlane:
    url: str
    workdir: Path
    ca: CertificateAuthority = field(repr=False)
    admin_kubeconfig: Path

    def api_client(self, kubeconfig: Path | None = None) -> k8s.ApiClient:
        """An API client of the kubernetes package: as the admin (system:masters) unless a kubeconfig is given."""
        from kubernetes import config

        configuration = k8s.Configuration()
        config.load_kube_config(str(kubeconfig or self.admin_kubeconfig), client_configuration=configuration)
        return k8s.ApiClient(configuration)

    def kubeconfig(
        self, name: str, *, token: str | None = None, user: str | None = None, groups: tuple[str, ...] = ()
    ) -> Path:
        """A kubeconfig for this API server: with a bearer token, or a client certificate for `user` in `groups`."""
        path = self.workdir / f"{name}.kubeconfig"
        if token is not None:
            return write_kubeconfig(path, server=self.url, ca_pem=self.ca.cert_pem, token=token)
        issued = self.ca.issue_client(user or name, groups)
        return write_kubeconfig(
            path, server=self.url, ca_pem=self.ca.cert_pem, client_cert_pem=issued.cert_pem,
            client_key_pem=issued.key_pem,
        )  # fmt: skip


def _write_pair(workdir: Path, stem: str, cert_pem: bytes, key_pem: bytes) -> tuple[Path, Path]:
    cert, key = workdir / f"{stem}.crt", workdir / f"{stem}.key"
    cert.write_bytes(cert_pem)
    write_private(key, key_pem)
    return cert, key


def apiserver_flags(workdir: Path, ca: CertificateAuthority, *, feature_gates: str = "") -> list[str]:
    """kube-apiserver's command line as kubeadm writes it, less what gpu-pulse-controlplane sets (its port, etcd)."""
    ca_file = workdir / "ca.crt"
    ca_file.write_bytes(ca.cert_pem)
    serving = ca.issue_server(["127.0.0.1", "localhost"], common_name="kube-apiserver")
    serving_cert, serving_key = _write_pair(workdir, "apiserver", serving.cert_pem, serving.key_pem)
    front_proxy_ca = CertificateAuthority.create("front-proxy-ca")
    front_proxy_ca_file = workdir / "front-proxy-ca.crt"
    front_proxy_ca_file.write_bytes(front_proxy_ca.cert_pem)
    proxy = front_proxy_ca.issue_client(FRONT_PROXY_USER)
    proxy_cert, proxy_key = _write_pair(workdir, "front-proxy-client", proxy.cert_pem, proxy.key_pem)
    signing_key = workdir / "sa.key"
    # SEC1 ("EC PRIVATE KEY"): --service-account-key-file reads public keys out of private keys in that form, not
    # PKCS#8 (k8s.io/client-go util/keyutil/key.go, ParsePublicKeysPEM)
    key = ec.generate_private_key(ec.SECP256R1())
    write_private(
        signing_key,
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()
        ),
    )
    flags = [
        "--authorization-mode=Node,RBAC",
        f"--client-ca-file={ca_file}",
        f"--tls-cert-file={serving_cert}",
        f"--tls-private-key-file={serving_key}",
        f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
        f"--service-account-key-file={signing_key}",
        f"--service-account-signing-key-file={signing_key}",
        f"--requestheader-client-ca-file={front_proxy_ca_file}",
        f"--requestheader-allowed-names={FRONT_PROXY_USER}",
        "--requestheader-username-headers=X-Remote-User",
        "--requestheader-group-headers=X-Remote-Group",
        "--requestheader-extra-headers-prefix=X-Remote-Extra-",
        f"--proxy-client-cert-file={proxy_cert}",
        f"--proxy-client-key-file={proxy_key}",
        "--service-cluster-ip-range=10.96.0.0/12",
        "--enable-admission-plugins=NodeRestriction",
        f"--cert-dir={workdir / 'certs'}",
    ]
    if feature_gates:
        flags.append(f"--feature-gates={feature_gates}")
    return flags


def start_controlplane(
    processes: ChildProcesses,
    workdir: Path,
    *,
    hpa_sync_period_s: float = HPA_SYNC_PERIOD_S,
    feature_gates: str = FEATURE_GATES,
) -> ControlPlane:
    """Build (or find) the binary, start it, and return once the API server serves and the controllers run."""
    workdir.mkdir(parents=True, exist_ok=True)
    binary = controlplane_binary(workdir / "build.log") if build_asked() else cached_binary()
    if binary is None:
        pytest.skip(NOT_BUILT)
    ca = CertificateAuthority.create("kubernetes")
    flags = apiserver_flags(workdir, ca, feature_gates=feature_gates)
    controller_manager = ca.issue_client("system:kube-controller-manager")
    controllers_kubeconfig = write_kubeconfig(
        workdir / "controller-manager.kubeconfig", server="https://127.0.0.1", ca_pem=ca.cert_pem,
        client_cert_pem=controller_manager.cert_pem, client_key_pem=controller_manager.key_pem,
    )  # fmt: skip
    argv = [
        str(binary),
        f"--data-dir={workdir / 'etcd'}",
        f"--controllers-kubeconfig={controllers_kubeconfig}",
        f"--horizontal-pod-autoscaler-sync-period={hpa_sync_period_s:g}s",
        "--",
        *flags,
    ]
    processes.start(PROCESS, argv)
    url = processes.wait_for_line(PROCESS, SERVING_LINE, patience(120)).group(1)
    processes.wait_for_line(PROCESS, CONTROLLERS_LINE, patience(60))
    admin = ca.issue_client("kubernetes-admin", ["system:masters"])
    admin_kubeconfig = write_kubeconfig(
        workdir / "admin.kubeconfig", server=url, ca_pem=ca.cert_pem, client_cert_pem=admin.cert_pem,
        client_key_pem=admin.key_pem,
    )  # fmt: skip
    return ControlPlane(url, workdir, ca, admin_kubeconfig)
