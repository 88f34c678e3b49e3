"""What every rendering of gpu-pulse must hold, kustomize overlay or Helm chart alike: the security contexts, least
privilege RBAC, verified APIServices, and command-line flags the real programs know."""

from __future__ import annotations

import re
import subprocess
import sys
from functools import cache
from typing import Any

from tests.deploy.rendering import REPO, find, one

# Every rule any ClusterRole or Role of gpu-pulse may grant: (role, apiGroups, resources) -> verbs. Nothing else, no
# wildcard verbs, no secrets.
READ = frozenset({"get", "list", "watch"})
ALL = frozenset({"*"})
ALLOWED_RULES: dict[tuple[str, frozenset[str], frozenset[str]], frozenset[str]] = {
    ("gpu-pulse-adapter", frozenset({""}), frozenset({"pods"})): READ,
    ("gpu-pulse-adapter", frozenset({"apps"}), frozenset({"replicasets"})): READ,
    ("gpu-pulse-exporter", frozenset({""}), frozenset({"pods"})): READ,
    ("gpu-pulse-exporter", frozenset({"resource.k8s.io"}), frozenset({"resourceslices"})): READ,
    ("gpu-pulse-exporter-dra", frozenset({""}), frozenset({"pods"})): READ,
    ("gpu-pulse-exporter-dra", frozenset({"resource.k8s.io"}), frozenset({"resourceslices"})): READ,
    ("gpu-pulse-metrics-reader", frozenset({"custom.metrics.k8s.io"}), frozenset({"*"})): READ,
    ("gpu-pulse-metrics-reader", frozenset({"custom.metrics.k8s.io", "external.metrics.k8s.io"}), ALL): READ,
}
# Bindings to roles gpu-pulse does not define: only these, for the adapter's service account.
BUILT_IN_ROLES = {
    ("ClusterRoleBinding", "system:auth-delegator", None),
    ("RoleBinding", "extension-apiserver-authentication-reader", "kube-system"),
}


def pod_spec(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    spec: dict[str, Any] = one(objects, kind, name)["spec"]["template"]["spec"]
    return spec


def check_security_contexts(objects: list[dict[str, Any]]) -> None:
    exporter = pod_spec(objects, "DaemonSet", "gpu-pulse-exporter")
    adapter = pod_spec(objects, "Deployment", "gpu-pulse-adapter")
    for pod in (exporter, adapter):
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        assert "hostNetwork" not in pod and "hostIPC" not in pod
        (container,) = pod["containers"]
        security = container["securityContext"]
        assert security["readOnlyRootFilesystem"] is True
        assert security["allowPrivilegeEscalation"] is False
        assert security["privileged"] is False
        assert security["capabilities"]["drop"] == ["ALL"]
        assert set(security["capabilities"].get("add", [])) <= {"SYS_ADMIN"}
    # the exporter: root for the kubelet socket only; SYS_ADMIN only with the MIG monitor option, hostPID only with
    # shared GPUs, the API token only with the watches that need it
    (container,) = exporter["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    mig = env.get("NVIDIA_MIG_MONITOR_DEVICES") == "all"
    assert ("add" in container["securityContext"]["capabilities"]) == mig
    if mig:
        assert container["securityContext"]["capabilities"]["add"] == ["SYS_ADMIN"]
    kubernetes = "--kubernetes" in container["args"]  # shared GPUs (pod watch) or DRA (pod and ResourceSlice watches)
    assert exporter["automountServiceAccountToken"] is kubernetes, "an API token exactly when the API is used"
    if exporter.get("hostPID", False):  # only for shared GPUs, which name the pods of processes through the API
        assert kubernetes, "hostPID only with shared GPUs attributed by process"
    # the adapter: never root, no added capability
    assert adapter["securityContext"]["runAsNonRoot"] is True and adapter["securityContext"]["runAsUser"] != 0
    assert "add" not in adapter["containers"][0]["securityContext"]["capabilities"]


def check_rbac(objects: list[dict[str, Any]], namespace: str) -> None:
    roles = find(objects, "ClusterRole") + find(objects, "Role")
    for role in roles:
        for rule in role["rules"]:
            key = (role["metadata"]["name"], frozenset(rule["apiGroups"]), frozenset(rule["resources"]))
            assert key in ALLOWED_RULES, f"{role['kind']}/{key[0]} grants {sorted(key[2])} in {sorted(key[1])}"
            assert set(rule["verbs"]) == ALLOWED_RULES[key], f"{key[0]}: verbs {rule['verbs']}"
            assert "nonResourceURLs" not in rule and "resourceNames" not in rule
    defined = {r["metadata"]["name"] for r in roles}
    adapter = {"kind": "ServiceAccount", "name": "gpu-pulse-adapter", "namespace": namespace}
    for binding in find(objects, "ClusterRoleBinding") + find(objects, "RoleBinding"):
        role = binding["roleRef"]["name"]
        if role not in defined:
            where = binding["metadata"].get("namespace") if binding["kind"] == "RoleBinding" else None
            assert (binding["kind"], role, where) in BUILT_IN_ROLES, f"{binding['kind']} to {role}"
            assert binding["subjects"] == [adapter]
    hpa = {"kind": "ServiceAccount", "name": "horizontal-pod-autoscaler", "namespace": "kube-system"}
    reader = [b for b in find(objects, "ClusterRoleBinding") if b["roleRef"]["name"] == "gpu-pulse-metrics-reader"]
    assert [b["subjects"] for b in reader] == [[hpa]]
    # the external metrics API is readable exactly when it is served
    groups = set(one(objects, "ClusterRole", "gpu-pulse-metrics-reader")["rules"][0]["apiGroups"])
    served = {a["spec"]["group"] for a in find(objects, "APIService")}
    assert groups == served


def check_api_services(objects: list[dict[str, Any]], namespace: str) -> None:
    services = find(objects, "APIService")
    assert {(a["spec"]["group"], a["spec"]["version"]) for a in services} >= {
        ("custom.metrics.k8s.io", "v1beta1"),
        ("custom.metrics.k8s.io", "v1beta2"),
    }
    for api in services:
        spec = api["spec"]
        assert "insecureSkipTLSVerify" not in spec, api["metadata"]["name"]
        injected = api["metadata"].get("annotations", {}).get("cert-manager.io/inject-ca-from")
        assert bool(spec.get("caBundle")) != bool(injected), "a caBundle, or cert-manager injecting one"
        if injected:
            certificate = one(objects, "Certificate", injected.split("/")[1])
            assert injected.split("/")[0] == certificate["metadata"]["namespace"] == namespace
            assert certificate["spec"]["secretName"] == "gpu-pulse-adapter-tls"
        assert spec["service"] == {"name": "gpu-pulse-adapter", "namespace": namespace, "port": 443}
        assert api["metadata"]["name"] == f"{spec['version']}.{spec['group']}"
    # the adapter serves the certificate of the Secret the APIServices trust
    adapter = pod_spec(objects, "Deployment", "gpu-pulse-adapter")
    args = adapter["containers"][0]["args"]
    volumes = {v["name"]: v for v in adapter["volumes"]}
    mounts = {m["name"]: m for m in adapter["containers"][0]["volumeMounts"]}
    assert volumes["serving-cert"]["secret"]["secretName"] == "gpu-pulse-adapter-tls"
    directory = mounts["serving-cert"]["mountPath"]
    assert f"--tls-cert-file={directory}/tls.crt" in args
    assert f"--tls-private-key-file={directory}/tls.key" in args


_FLAG = re.compile(r"\[?(--[a-z0-9][a-z0-9-]*)")


def flags(words: list[str]) -> set[str]:
    """The flag names in manifest args (`--x=1`) or in --help words (`--x,`, `[--x`, `--x]`)."""
    return {m.group(1) for a in words if (m := _FLAG.match(a))}


@cache
def known_flags(program: str) -> frozenset[str]:
    """The flags the real program's --help lists (run from this working tree: `python -m exporter --help`)."""
    result = subprocess.run(
        [sys.executable, "-m", program, "--help"], capture_output=True, text=True, timeout=60, cwd=REPO, check=False
    )
    assert result.returncode == 0, result.stderr
    return frozenset(flags(result.stdout.split()))


def check_flags(objects: list[dict[str, Any]]) -> None:
    for kind, name, program in (
        ("DaemonSet", "gpu-pulse-exporter", "exporter"),
        ("Deployment", "gpu-pulse-adapter", "adapter"),
    ):
        used = flags(pod_spec(objects, kind, name)["containers"][0]["args"])
        unknown = used - known_flags(program)
        assert unknown == set(), f"flags gpu-pulse-{program} does not know: {sorted(unknown)}"


def check_all(objects: list[dict[str, Any]], namespace: str = "gpu-pulse") -> None:
    check_security_contexts(objects)
    check_rbac(objects, namespace)
    check_api_services(objects, namespace)
    check_flags(objects)
