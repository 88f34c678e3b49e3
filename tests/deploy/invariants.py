"""What every rendering of gpu-pulse must hold, kustomize overlay or Helm chart alike: the security contexts, the Pod
Security level each namespace allows and its workloads meet, least privilege RBAC, the exporters' /pods for the
adapter only, verified APIServices, and command-line flags the real programs know."""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass
from functools import cache
from typing import Any

from tests.deploy.rendering import REPO, find, one


@dataclass(frozen=True)
class Names:
    """How a rendering names gpu-pulse's objects: <fullname>-exporter, <fullname>-adapter, ... (the chart's fullname,
    nameOverride and fullnameOverride), and how it labels the pods: app.kubernetes.io/name <name>-exporter. The
    kustomize manifests' are the defaults."""

    fullname: str = "gpu-pulse"
    name: str = "gpu-pulse"

    def of(self, part: str) -> str:
        return f"{self.fullname}-{part}"

    @property
    def exporter(self) -> str:
        return self.of("exporter")

    @property
    def adapter(self) -> str:
        return self.of("adapter")

    @property
    def adapter_label(self) -> str:
        return f"{self.name}-adapter"

    def part(self, object_name: str) -> str:
        """The part of an object's name after the fullname: gpu-pulse-metrics-reader -> metrics-reader."""
        prefix = f"{self.fullname}-"
        assert object_name.startswith(prefix), f"{object_name} is not named from {self.fullname}"
        return object_name.removeprefix(prefix)


DEFAULT_NAMES = Names()

# Every rule any ClusterRole or Role of gpu-pulse may grant: (role name after the fullname, apiGroups, resources) ->
# verbs. Nothing else, no wildcard verbs, no secrets.
READ = frozenset({"get", "list", "watch"})
ALL = frozenset({"*"})
ALLOWED_RULES: dict[tuple[str, frozenset[str], frozenset[str]], frozenset[str]] = {
    ("adapter", frozenset({""}), frozenset({"pods"})): READ,
    ("adapter", frozenset({"apps"}), frozenset({"replicasets"})): READ,
    ("exporter", frozenset({""}), frozenset({"pods"})): READ,
    ("exporter", frozenset({"resource.k8s.io"}), frozenset({"resourceslices"})): READ,
    ("exporter-dra", frozenset({""}), frozenset({"pods"})): READ,
    ("exporter-dra", frozenset({"resource.k8s.io"}), frozenset({"resourceslices"})): READ,
    ("metrics-reader", frozenset({"custom.metrics.k8s.io"}), frozenset({"*"})): READ,
    ("metrics-reader", frozenset({"custom.metrics.k8s.io", "external.metrics.k8s.io"}), ALL): READ,
    # KEDA's client certificate user: read through the external scaler what the HPA reads (adapter/keda/callers.py)
    ("keda-scaler", frozenset({"custom.metrics.k8s.io"}), frozenset({"*"})): frozenset({"get"}),
    # a demand trigger is authorized as the External metric's request (adapter/keda/callers.py)
    ("keda-scaler", frozenset({"external.metrics.k8s.io"}), frozenset({"*"})): frozenset({"get"}),
    ("exporter-tokenreview", frozenset({"authentication.k8s.io"}), frozenset({"tokenreviews"})): frozenset({"create"}),
}
EXPORTER_NAMESPACE = "gpu-pulse-exporter"
# Bindings to roles gpu-pulse does not define: only these, for the adapter's service account.
BUILT_IN_ROLES = {
    ("ClusterRoleBinding", "system:auth-delegator", None),
    ("RoleBinding", "extension-apiserver-authentication-reader", "kube-system"),
}


def pod_spec(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    spec: dict[str, Any] = one(objects, kind, name)["spec"]["template"]["spec"]
    return spec


def check_security_contexts(
    objects: list[dict[str, Any]], adapter_host_network: bool = False, names: Names = DEFAULT_NAMES
) -> None:
    exporter = pod_spec(objects, "DaemonSet", names.exporter)
    adapter = pod_spec(objects, "Deployment", names.adapter)
    assert adapter.get("hostNetwork", False) is adapter_host_network, "the adapter's host network only when asked"
    relays = exporter["containers"][1:]
    if relays:  # kernelLog: the one privileged container, which only relays the kernel log (docs/security.md)
        (relay,) = relays
        assert relay["name"] == "kmsg-relay" and relay["securityContext"]["privileged"] is True
        assert relay["securityContext"]["readOnlyRootFilesystem"] is True
        assert "ports" not in relay and "env" not in relay
        assert [m["name"] for m in relay["volumeMounts"]] == ["kernel-log"]
    for pod in (exporter, adapter):
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        assert "hostIPC" not in pod
        (container, *_) = pod["containers"]
        security = container["securityContext"]
        assert security["readOnlyRootFilesystem"] is True
        assert security["allowPrivilegeEscalation"] is False
        assert security["privileged"] is False
        assert security["capabilities"]["drop"] == ["ALL"]
        assert set(security["capabilities"].get("add", [])) <= {"SYS_ADMIN"}
    assert "hostNetwork" not in exporter
    # the exporter: root for the kubelet socket only; SYS_ADMIN only with the MIG monitor option, hostPID only with
    # shared GPUs, the API token only with the watches that need it
    container = exporter["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    mig = env.get("NVIDIA_MIG_MONITOR_DEVICES") == "all"
    assert ("add" in container["securityContext"]["capabilities"]) == mig
    if mig:
        assert container["securityContext"]["capabilities"]["add"] == ["SYS_ADMIN"]
    kubernetes = "--kubernetes" in container["args"]  # shared GPUs (pod watch) or DRA (pod and ResourceSlice watches)
    reviews = any(a.startswith("--auth-allowed-users=") for a in container["args"])  # TokenReviews of /pods callers
    assert exporter["automountServiceAccountToken"] is (kubernetes or reviews), "an API token exactly when it is used"
    if exporter.get("hostPID", False):  # only for shared GPUs, which name the pods of processes through the API
        assert kubernetes, "hostPID only with shared GPUs attributed by process"
    # the adapter: never root, no added capability
    assert adapter["securityContext"]["runAsNonRoot"] is True and adapter["securityContext"]["runAsUser"] != 0
    assert "add" not in adapter["containers"][0]["securityContext"]["capabilities"]


# The Pod Security Standards (kubernetes.io/docs/concepts/security/pod-security-standards, as the PodSecurity
# admission of Kubernetes 1.25+ enforces them): what the restricted level allows of a pod, beyond baseline.
RESTRICTED_VOLUMES = frozenset(
    {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret"}
)


def restricted_violations(pod: dict[str, Any]) -> list[str]:
    """What of a pod spec the restricted level refuses (empty: it runs under restricted)."""
    found = [f"volume {v['name']}" for v in pod.get("volumes", []) if not set(v) - {"name"} <= RESTRICTED_VOLUMES]
    found += [f"{key}" for key in ("hostNetwork", "hostPID", "hostIPC") if pod.get(key)]
    pod_context = pod.get("securityContext", {})
    for container in pod["containers"] + pod.get("initContainers", []):
        context = {**pod_context, **container.get("securityContext", {})}
        name = container["name"]
        if context.get("privileged"):
            found.append(f"{name}: privileged")
        if context.get("allowPrivilegeEscalation") is not False:
            found.append(f"{name}: allowPrivilegeEscalation is not false")
        if context.get("runAsNonRoot") is not True or context.get("runAsUser") == 0:
            found.append(f"{name}: may run as root")
        if context.get("seccompProfile", {}).get("type") not in ("RuntimeDefault", "Localhost"):
            found.append(f"{name}: no RuntimeDefault or Localhost seccomp profile")
        capabilities = context.get("capabilities", {})
        if "ALL" not in capabilities.get("drop", []) or set(capabilities.get("add", [])) - {"NET_BIND_SERVICE"}:
            found.append(f"{name}: capabilities beyond NET_BIND_SERVICE")
        if any(port.get("hostPort") for port in container.get("ports", [])):
            found.append(f"{name}: a host port")
    return found


def check_pod_security(
    objects: list[dict[str, Any]],
    namespace: str,
    exporter_namespace: str,
    adapter_host_network: bool = False,
    names: Names = DEFAULT_NAMES,
) -> None:
    """The adapter runs under restricted, in its namespace (but for the host network, where a user asks for it); the
    exporter, which needs privileged, in one of its own (or in the release's, which then must allow it). Namespaces a
    rendering creates are labelled for what runs in them."""
    adapter = one(objects, "Deployment", names.adapter)
    exporter = one(objects, "DaemonSet", names.exporter)
    assert adapter["metadata"]["namespace"] == namespace
    assert exporter["metadata"]["namespace"] == exporter_namespace
    beyond = ["hostNetwork"] if adapter_host_network else []
    assert restricted_violations(adapter["spec"]["template"]["spec"]) == beyond
    assert restricted_violations(exporter["spec"]["template"]["spec"]), "the exporter needs more than restricted"
    levels = {
        ns["metadata"]["name"]: ns["metadata"].get("labels", {}).get("pod-security.kubernetes.io/enforce")
        for ns in find(objects, "Namespace")
    }
    if exporter_namespace in levels:
        assert levels[exporter_namespace] == "privileged"
    if namespace in levels and namespace != exporter_namespace:
        assert levels[namespace] == "restricted", "the adapter's namespace enforces restricted"
    for workload in find(objects, "Deployment") + find(objects, "DaemonSet"):
        if workload["metadata"]["namespace"] == namespace and namespace != exporter_namespace and not beyond:
            assert restricted_violations(workload["spec"]["template"]["spec"]) == [], workload["metadata"]["name"]


def check_exporter_access(
    objects: list[dict[str, Any]], namespace: str, exporter_namespace: str, names: Names = DEFAULT_NAMES
) -> None:
    """The exporters serve /pods to the adapter's ServiceAccount only, whose token for them is made for their audience;
    they reach the API for TokenReviews; and only the adapter and Prometheus reach them, each from its namespace."""
    exporter = one(objects, "DaemonSet", names.exporter)["spec"]["template"]["spec"]
    adapter = one(objects, "Deployment", names.adapter)["spec"]["template"]["spec"]
    args = exporter["containers"][0]["args"]
    users = [a.split("=", 1)[1] for a in args if a.startswith("--auth-allowed-users=")]
    assert users == [f"system:serviceaccount:{namespace}:{names.adapter}"]
    (audience,) = [a.split("=", 1)[1] for a in args if a.startswith("--auth-token-audience=")]
    adapter_args = adapter["containers"][0]["args"]
    if "--source=direct" in adapter_args:
        (token_file,) = [a.split("=", 1)[1] for a in adapter_args if a.startswith("--exporter-token-file=")]
        mounts = {m["mountPath"]: m["name"] for m in adapter["containers"][0]["volumeMounts"]}
        volumes = {v["name"]: v for v in adapter["volumes"]}
        directory, _, file_name = token_file.rpartition("/")
        (source,) = volumes[mounts[directory]]["projected"]["sources"]
        token = source["serviceAccountToken"]
        assert token["audience"] == audience and token["path"] == file_name
        assert 600 <= token["expirationSeconds"] <= 86_400
        assert f"--exporter-namespace={exporter_namespace}" in adapter_args
    reviewers = [
        b for b in find(objects, "ClusterRoleBinding") if b["roleRef"]["name"] == names.of("exporter-tokenreview")
    ]
    assert [b["subjects"] for b in reviewers] == [
        [{"kind": "ServiceAccount", "name": names.exporter, "namespace": exporter_namespace}]
    ]
    for policy in find(objects, "NetworkPolicy", names.exporter):
        assert policy["metadata"]["namespace"] == exporter_namespace
        peers = [peer for rule in policy["spec"]["ingress"] for peer in rule["from"]]
        assert peers and all(
            (peer.get("namespaceSelector", {}).get("matchLabels") and peer.get("podSelector", {}).get("matchLabels"))
            or set(peer) == {"ipBlock"}
            for peer in peers
        ), "every peer is named by namespace and by pod labels, or is a block of addresses a user chose"
        (adapter_peer,) = [
            p
            for p in peers
            if p.get("podSelector", {}).get("matchLabels") == {"app.kubernetes.io/name": names.adapter_label}
        ]
        assert adapter_peer["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": namespace}


def check_rbac(
    objects: list[dict[str, Any]], namespace: str, adapter_account: str | None = None, names: Names = DEFAULT_NAMES
) -> None:
    adapter_account = adapter_account or names.adapter
    roles = find(objects, "ClusterRole") + find(objects, "Role")
    for role in roles:
        for rule in role["rules"]:
            key = (names.part(role["metadata"]["name"]), frozenset(rule["apiGroups"]), frozenset(rule["resources"]))
            assert key in ALLOWED_RULES, f"{role['kind']}/{key[0]} grants {sorted(key[2])} in {sorted(key[1])}"
            assert set(rule["verbs"]) == ALLOWED_RULES[key], f"{key[0]}: verbs {rule['verbs']}"
            assert "nonResourceURLs" not in rule and "resourceNames" not in rule
    defined = {r["metadata"]["name"] for r in roles}
    adapter = {"kind": "ServiceAccount", "name": adapter_account, "namespace": namespace}
    for binding in find(objects, "ClusterRoleBinding") + find(objects, "RoleBinding"):
        role = binding["roleRef"]["name"]
        if role not in defined:
            where = binding["metadata"].get("namespace") if binding["kind"] == "RoleBinding" else None
            assert (binding["kind"], role, where) in BUILT_IN_ROLES, f"{binding['kind']} to {role}"
            assert binding["subjects"] == [adapter]
    hpa = {"kind": "ServiceAccount", "name": "horizontal-pod-autoscaler", "namespace": "kube-system"}
    reader = [b for b in find(objects, "ClusterRoleBinding") if b["roleRef"]["name"] == names.of("metrics-reader")]
    assert [b["subjects"] for b in reader] == [[hpa]]
    # the external metrics API is readable exactly when it is served
    groups = set(one(objects, "ClusterRole", names.of("metrics-reader"))["rules"][0]["apiGroups"])
    served = {a["spec"]["group"] for a in find(objects, "APIService")}
    assert groups == served


def check_api_services(objects: list[dict[str, Any]], namespace: str, names: Names = DEFAULT_NAMES) -> None:
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
            assert certificate["spec"]["secretName"] == names.of("adapter-tls")
        assert spec["service"] == {"name": names.adapter, "namespace": namespace, "port": 443}
        assert api["metadata"]["name"] == f"{spec['version']}.{spec['group']}"
    # the adapter serves the certificate of the Secret the APIServices trust
    adapter = pod_spec(objects, "Deployment", names.adapter)
    args = adapter["containers"][0]["args"]
    volumes = {v["name"]: v for v in adapter["volumes"]}
    mounts = {m["name"]: m for m in adapter["containers"][0]["volumeMounts"]}
    assert volumes["serving-cert"]["secret"]["secretName"] == names.of("adapter-tls")
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


def check_flags(objects: list[dict[str, Any]], names: Names = DEFAULT_NAMES) -> None:
    for kind, name, program in (
        ("DaemonSet", names.exporter, "exporter"),
        ("Deployment", names.adapter, "adapter"),
    ):
        used = flags(pod_spec(objects, kind, name)["containers"][0]["args"])
        unknown = used - known_flags(program)
        assert unknown == set(), f"flags gpu-pulse-{program} does not know: {sorted(unknown)}"


def check_all(
    objects: list[dict[str, Any]],
    namespace: str = "gpu-pulse",
    exporter_namespace: str = EXPORTER_NAMESPACE,
    *,
    exporter_auth: bool = True,
    adapter_host_network: bool = False,
    adapter_account: str | None = None,
    names: Names = DEFAULT_NAMES,
) -> None:
    check_security_contexts(objects, adapter_host_network, names)
    check_pod_security(objects, namespace, exporter_namespace, adapter_host_network, names)
    if exporter_auth:  # the default everywhere; a chart user may turn it off (exporter.auth.enabled)
        check_exporter_access(objects, namespace, exporter_namespace, names)
    check_rbac(objects, namespace, adapter_account, names)
    check_api_services(objects, namespace, names)
    check_flags(objects, names)
