"""The references between the objects of one rendering, walked: every name or label selector an object gives leads to
an object the same rendering holds (or to one Kubernetes itself provides), and the Prometheus job each monitor gives
its targets, derived as the Prometheus Operator documents it. A rename that misses one reference shows here."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

# What Kubernetes provides that gpu-pulse's objects name: the aggregated API server's roles and the HPA controller.
BUILT_IN_ROLES = frozenset(
    {("ClusterRole", "system:auth-delegator"), ("Role", "extension-apiserver-authentication-reader")}
)
BUILT_IN_ACCOUNTS = frozenset({("kube-system", "horizontal-pod-autoscaler")})
NAMESPACE_NAME = "kubernetes.io/metadata.name"  # the label the API server sets on every namespace


@dataclass(frozen=True)
class Pods:
    """The pods a workload makes: where, their labels, their spec, and the workload's name."""

    namespace: str
    labels: dict[str, str]
    spec: dict[str, Any]
    owner: str

    @property
    def ports(self) -> dict[str, int]:
        return {p["name"]: p["containerPort"] for c in self.spec["containers"] for p in c.get("ports", [])}

    @property
    def args(self) -> list[str]:
        args: list[str] = self.spec["containers"][0].get("args", [])
        return args


def _matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return bool(selector) and selector.items() <= labels.items()


def _flag(args: list[str], name: str) -> str | None:
    values = [a.split("=", 1)[1] for a in args if a.startswith(f"--{name}=")]
    return values[0] if values else None


def parse_equality_selector(text: str) -> dict[str, str]:
    """`a=b,c=d` (the equality-based selectors the chart gives the adapter) as a map."""
    pairs = [term.split("=", 1) for term in text.split(",")]
    assert all(len(p) == 2 and p[0] and "!" not in p[0] for p in pairs), f"not an equality selector: {text}"
    return {key: value for key, value in pairs}


class Rendering:
    """One rendering's objects, indexed by kind, namespace and name."""

    def __init__(self, objects: list[dict[str, Any]]) -> None:
        self.objects = objects
        self.pods = [
            Pods(o["metadata"]["namespace"], o["spec"]["template"]["metadata"].get("labels", {}),
                 o["spec"]["template"]["spec"], f"{o['kind']}/{o['metadata']['name']}")
            for o in objects
            if o["kind"] in ("Deployment", "DaemonSet")
        ]  # fmt: skip

    def of(self, kind: str) -> Iterator[dict[str, Any]]:
        return (o for o in self.objects if o["kind"] == kind)

    def has(self, kind: str, name: str, namespace: str | None = None) -> bool:
        return any(
            o["metadata"]["name"] == name and (namespace is None or o["metadata"].get("namespace") == namespace)
            for o in self.of(kind)
        )

    def selected_pods(self, selector: dict[str, str], namespaces: list[str]) -> list[Pods]:
        return [p for p in self.pods if p.namespace in namespaces and _matches(selector, p.labels)]

    def selected_services(self, selector: dict[str, str], namespaces: list[str]) -> list[dict[str, Any]]:
        return [
            s
            for s in self.of("Service")
            if s["metadata"]["namespace"] in namespaces and _matches(selector, s["metadata"].get("labels", {}))
        ]

    def secrets(self, namespace: str) -> set[str]:
        """The Secrets a namespace will hold: rendered ones, and those cert-manager writes for its Certificates."""
        names = {s["metadata"]["name"] for s in self.of("Secret") if s["metadata"]["namespace"] == namespace}
        issued = {c["spec"]["secretName"] for c in self.of("Certificate") if c["metadata"]["namespace"] == namespace}
        return names | issued

    @property
    def namespaces(self) -> set[str]:
        return {o["metadata"]["namespace"] for o in self.objects if "namespace" in o["metadata"]}


def unresolved(objects: list[dict[str, Any]], users_objects: frozenset[str] = frozenset()) -> list[str]:
    """Every reference of the rendering that leads nowhere, in words (empty: all resolve). `users_objects`: what the
    values name that the user creates: Secrets (exporter.tls.secretName and the like), ConfigMaps (extraVolumes),
    ServiceAccounts (serviceAccount.create false), `<kind>/<name>`."""
    r = Rendering(objects)
    problems: list[str] = []
    problems += _workloads(r, users_objects)
    problems += _services(r)
    problems += _rbac(r)
    problems += _api_services_and_certificates(r)
    problems += _monitors(r, users_objects)
    problems += _policies(r)
    problems += _adapter_finds_exporters(r)
    return problems


def _workloads(r: Rendering, users: frozenset[str]) -> list[str]:
    problems = []
    for workload in [*r.of("Deployment"), *r.of("DaemonSet")]:
        name = f"{workload['kind']}/{workload['metadata']['name']}"
        selector = workload["spec"]["selector"]["matchLabels"]
        if not _matches(selector, workload["spec"]["template"]["metadata"]["labels"]):
            problems.append(f"{name}: its selector {selector} does not select its own pods")
    for pods in r.pods:
        account = pods.spec.get("serviceAccountName", "default")
        if not r.has("ServiceAccount", account, pods.namespace) and f"ServiceAccount/{account}" not in users:
            problems.append(f"{pods.owner}: ServiceAccount {account} is not rendered in {pods.namespace}")
        for volume in pods.spec.get("volumes", []):
            config = volume.get("configMap", {}).get("name")
            if config and not r.has("ConfigMap", config, pods.namespace) and f"ConfigMap/{config}" not in users:
                problems.append(f"{pods.owner}: ConfigMap {config} is not rendered")
            secret = volume.get("secret", {}).get("secretName")
            if secret and secret not in r.secrets(pods.namespace) and f"Secret/{secret}" not in users:
                problems.append(f"{pods.owner}: Secret {secret} is not rendered in {pods.namespace}")
    for pdb in r.of("PodDisruptionBudget"):
        if not r.selected_pods(pdb["spec"]["selector"]["matchLabels"], [pdb["metadata"]["namespace"]]):
            problems.append(f"PodDisruptionBudget/{pdb['metadata']['name']} selects no pods")
    return problems


def _services(r: Rendering) -> list[str]:
    problems = []
    for service in r.of("Service"):
        name = f"Service/{service['metadata']['name']}"
        selected = r.selected_pods(service["spec"]["selector"], [service["metadata"]["namespace"]])
        if not selected:
            problems.append(f"{name} selects no pods")
        for port in service["spec"]["ports"]:
            if not all(port["targetPort"] in pods.ports for pods in selected):
                problems.append(f"{name}: targetPort {port['targetPort']} is not a port of its pods")
    return problems


def _rbac(r: Rendering) -> list[str]:
    problems = []
    for binding in [*r.of("ClusterRoleBinding"), *r.of("RoleBinding")]:
        name = f"{binding['kind']}/{binding['metadata']['name']}"
        role = binding["roleRef"]
        namespace = binding["metadata"].get("namespace") if role["kind"] == "Role" else None
        if not r.has(role["kind"], role["name"], namespace) and (role["kind"], role["name"]) not in BUILT_IN_ROLES:
            problems.append(f"{name}: {role['kind']} {role['name']} is not rendered")
        for subject in binding["subjects"]:
            if subject["kind"] != "ServiceAccount":
                continue  # a User (KEDA's certificate) is whoever the certificate names
            where = (subject["namespace"], subject["name"])
            if not r.has("ServiceAccount", subject["name"], subject["namespace"]) and where not in BUILT_IN_ACCOUNTS:
                problems.append(f"{name}: ServiceAccount {subject['namespace']}/{subject['name']} is not rendered")
    # the identity the exporters serve /pods to is the ServiceAccount the adapter's pods run as
    accounts = {f"system:serviceaccount:{p.namespace}:{p.spec.get('serviceAccountName')}" for p in r.pods}
    for pods in r.pods:
        for user in (_flag(pods.args, "auth-allowed-users") or "").split(","):
            if user and user not in accounts:
                problems.append(f"{pods.owner}: --auth-allowed-users names {user}, which no rendered pod runs as")
    return problems


def _api_services_and_certificates(r: Rendering) -> list[str]:
    problems = []
    for api in r.of("APIService"):
        name = f"APIService/{api['metadata']['name']}"
        service = api["spec"]["service"]
        found = [s for s in r.of("Service") if (s["metadata"]["name"], s["metadata"]["namespace"]) ==
                 (service["name"], service["namespace"])]  # fmt: skip
        if not found:
            problems.append(f"{name}: Service {service['namespace']}/{service['name']} is not rendered")
        elif service["port"] not in [p["port"] for p in found[0]["spec"]["ports"]]:
            problems.append(f"{name}: port {service['port']} is not one of its Service's")
        injected = api["metadata"].get("annotations", {}).get("cert-manager.io/inject-ca-from")
        if injected:
            namespace, _, certificate = injected.partition("/")
            if not r.has("Certificate", certificate, namespace):
                problems.append(f"{name}: cert-manager injects the CA of {injected}, which is not rendered")
    for certificate in r.of("Certificate"):
        issuer = certificate["spec"]["issuerRef"]
        if not r.has(issuer.get("kind", "Issuer"), issuer["name"], certificate["metadata"]["namespace"]):
            problems.append(f"Certificate/{certificate['metadata']['name']}: Issuer {issuer['name']} is not rendered")
    for issuer in r.of("Issuer"):
        secret = issuer["spec"].get("ca", {}).get("secretName")
        if secret and secret not in r.secrets(issuer["metadata"]["namespace"]):
            problems.append(f"Issuer/{issuer['metadata']['name']}: its CA Secret {secret} is never written")
    return problems


def _monitors(r: Rendering, users: frozenset[str]) -> list[str]:
    problems = []
    for monitor in r.of("ServiceMonitor"):
        name = f"ServiceMonitor/{monitor['metadata']['name']}"
        services = r.selected_services(monitor["spec"]["selector"]["matchLabels"],
                                       monitor["spec"]["namespaceSelector"]["matchNames"])  # fmt: skip
        if not services:
            problems.append(f"{name} selects no Service")
        for endpoint in monitor["spec"]["endpoints"]:
            for service in services:
                if endpoint["port"] not in [p["name"] for p in service["spec"]["ports"]]:
                    problems.append(f"{name}: port {endpoint['port']} is not one of {service['metadata']['name']}'s")
            tls = endpoint.get("tlsConfig", {})
            secret = tls.get("ca", {}).get("secret", {}).get("name")
            if secret and secret not in r.secrets(monitor["metadata"]["namespace"]) and f"Secret/{secret}" not in users:
                problems.append(f"{name}: the CA Secret {secret} is not in {monitor['metadata']['namespace']}")
            server = tls.get("serverName")
            if server and server not in {f"{s['metadata']['name']}.{s['metadata']['namespace']}.svc" for s in services}:
                problems.append(f"{name}: serverName {server} is not the name of the Service it scrapes")
    for monitor in r.of("PodMonitor"):
        name = f"PodMonitor/{monitor['metadata']['name']}"
        pods = r.selected_pods(monitor["spec"]["selector"]["matchLabels"],
                               monitor["spec"]["namespaceSelector"]["matchNames"])  # fmt: skip
        if not pods:
            problems.append(f"{name} selects no pods")
        for endpoint in monitor["spec"]["podMetricsEndpoints"]:
            if not all(endpoint["port"] in p.ports for p in pods):
                problems.append(f"{name}: port {endpoint['port']} is not a port of its pods")
    return problems


def _policies(r: Rendering) -> list[str]:
    """Each NetworkPolicy guards rendered pods, and each peer it names in a namespace of the rendering is rendered."""
    problems = []
    for policy in r.of("NetworkPolicy"):
        name = f"NetworkPolicy/{policy['metadata']['name']}"
        guarded = r.selected_pods(policy["spec"]["podSelector"]["matchLabels"], [policy["metadata"]["namespace"]])
        if not guarded:
            problems.append(f"{name} guards no pods")
        for rule in policy["spec"].get("ingress", []):
            for port in rule.get("ports", []):
                if not all(port["port"] in p.ports for p in guarded):
                    problems.append(f"{name}: port {port['port']} is not a port of the pods it guards")
            for peer in rule.get("from", []):
                namespace = peer.get("namespaceSelector", {}).get("matchLabels", {}).get(NAMESPACE_NAME)
                if namespace in r.namespaces and not r.selected_pods(peer["podSelector"]["matchLabels"], [namespace]):
                    problems.append(f"{name}: admits {peer['podSelector']['matchLabels']} in {namespace}: no such pods")
    return problems


def _adapter_finds_exporters(r: Rendering) -> list[str]:
    """The adapter's direct source finds each node's exporter by --exporter-selector in --exporter-namespace."""
    problems = []
    for pods in r.pods:
        selector = _flag(pods.args, "exporter-selector")
        if selector is None:
            continue
        namespace = _flag(pods.args, "exporter-namespace") or ""
        exporters = r.selected_pods(parse_equality_selector(selector), [namespace])
        if [e.owner for e in exporters] != [p.owner for p in r.pods if p.owner.startswith("DaemonSet/")]:
            problems.append(f"{pods.owner}: --exporter-selector={selector} in {namespace} finds {exporters}")
        port = int(_flag(pods.args, "exporter-port") or 0)
        if not all(port in e.ports.values() for e in exporters):
            problems.append(f"{pods.owner}: --exporter-port={port} is not the exporters' port")
    return problems


def scrape_jobs(objects: list[dict[str, Any]]) -> dict[str, set[str]]:
    """Each ServiceMonitor's and PodMonitor's job label values, as the Prometheus Operator gives them (its CRDs'
    spec.jobLabel; prometheus-operator pkg/prometheus/promcfg.go writes the Service's name as the job, then the value of
    the jobLabel's Service label where there is one): a ServiceMonitor's target takes the value of its Service's label
    named by jobLabel, or the Service's name without it; a PodMonitor's, its pod's label, or
    <namespace>/<PodMonitor name> without one. tests/deploy/test_scrape_labels.py has a real Prometheus agree."""
    r = Rendering(objects)
    jobs: dict[str, set[str]] = {}
    for monitor in r.of("ServiceMonitor"):
        spec = monitor["spec"]
        services = r.selected_services(spec["selector"]["matchLabels"], spec["namespaceSelector"]["matchNames"])
        jobs[f"ServiceMonitor/{monitor['metadata']['name']}"] = {
            s["metadata"].get("labels", {}).get(spec.get("jobLabel", ""), s["metadata"]["name"]) for s in services
        }
    for monitor in r.of("PodMonitor"):
        spec = monitor["spec"]
        pods = r.selected_pods(spec["selector"]["matchLabels"], spec["namespaceSelector"]["matchNames"])
        fallback = f"{monitor['metadata']['namespace']}/{monitor['metadata']['name']}"
        jobs[f"PodMonitor/{monitor['metadata']['name']}"] = {
            p.labels.get(spec.get("jobLabel", ""), fallback) for p in pods
        }
    return jobs
