"""The chart with every value set (tests/deploy/values/): each key values.schema.json knows is set by a values file
here, the chart lints strictly and renders with them, every object validates (kubernetes-validate; the Prometheus
Operator's and cert-manager's kinds against their CRDs' models, tests/deploy/crds.py), the invariants shared with
kustomize hold, and each value shows in what is rendered. Also what the schema and the templates refuse, and the
PodDisruptionBudget that would block every drain."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from adapter.metrics_config import parse_metrics_config
from adapter.promadapter.config import load_document, parse_prom_adapter_config
from adapter.promadapter.naming import namers_from_config
from adapter.promadapter.restmapper import RestMapper
from dashboards.generate import render_all as render_all_boards
from rules.jobs import DEFAULT_ADAPTER_JOB, DEFAULT_EXPORTER_JOB
from tests.deploy.crds import validate, validate_custom
from tests.deploy.invariants import check_all
from tests.deploy.references import scrape_jobs, unresolved
from tests.deploy.rendering import CHART, find, helm_render, one, require_helm
from tests.deploy.schemas import VERSIONS

helm_python = require_helm()

VALUES_DIR = Path(__file__).parent / "values"
FILES = ("everything", "bearer-token")
NAMESPACE = "gpu-pulse"


def _values(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((VALUES_DIR / f"{name}.yaml").read_text(encoding="utf-8"))
    return loaded


@pytest.fixture(scope="module")
def renders() -> dict[str, list[dict[str, Any]]]:
    return {name: helm_render(_values(name)) for name in FILES}


def _schema_paths(schema: dict[str, Any], prefix: str = "") -> dict[str, bool]:
    """Every key the schema describes, as a dotted path, and whether it is closed (has properties of its own, walked
    into) or free-form (a map of labels, a Kubernetes object)."""
    paths = {}
    for key, sub in schema.get("properties", {}).items():
        if "not" in sub and not sub["not"]:
            continue  # a key the schema forbids (a label of the chart's own)
        path = f"{prefix}{key}"
        paths[path] = "properties" in sub
        paths |= _schema_paths(sub, f"{path}.")
    return paths


def _value_paths(values: Any, prefix: str = "") -> set[str]:
    if not isinstance(values, dict):
        return set()
    paths = set()
    for key, sub in values.items():
        paths.add(f"{prefix}{key}")
        paths |= _value_paths(sub, f"{prefix}{key}.")
    return paths


def test_the_values_files_set_every_value_the_schema_knows() -> None:
    schema = _schema_paths(json.loads((CHART / "values.schema.json").read_text(encoding="utf-8")))
    known = set(schema) - {"global"}  # Helm's own, for parent charts
    set_here = set().union(*(_value_paths(_values(name)) for name in FILES))
    assert known - set_here == set(), "values the test files leave unset"
    # and the schema describes every key of values.yaml that is not inside a free-form map
    defaults = _value_paths(yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8")))
    closed = {""} | {path for path, has_properties in schema.items() if has_properties}
    undescribed = {p for p in defaults if p.rpartition(".")[0] in closed} - known
    assert undescribed == set(), "values.yaml keys the schema does not describe"


@pytest.mark.parametrize("name", FILES)
def test_lints_strictly(name: str) -> None:
    report = helm_python.lint(str(CHART), _values(name), strict=True, namespace=NAMESPACE)
    assert report["errors"] == [] and [m for m in report["messages"] if m["severity"] >= 2] == [], report


@pytest.mark.parametrize("name", FILES)
@pytest.mark.parametrize("version", VERSIONS)
def test_every_object_validates(renders: dict[str, list[dict[str, Any]]], name: str, version: str) -> None:
    for obj in renders[name]:
        validate(obj, version)
    keys = [(o["kind"], o["metadata"]["name"]) for o in renders[name]]
    assert len(keys) == len(set(keys)), "no object twice"


def test_invariants_hold(renders: dict[str, list[dict[str, Any]]]) -> None:
    check_all(renders["everything"], NAMESPACE, "gpu-metrics", exporter_auth=False, adapter_host_network=True,
              adapter_account="gpu-metrics-api")  # fmt: skip
    check_all(renders["bearer-token"], NAMESPACE, exporter_auth=False)
    # every reference between the objects resolves, but to what the values say the user creates
    users = {
        "everything": {"Secret/corp-keda-ca", "Secret/exporter-tls", "Secret/exporter-basic-auth",
                       "Secret/gpu-pulse-adapter-ca", "ConfigMap/gpu-pulse-metrics", "ConfigMap/gpu-pulse-site"},
        "bearer-token": {"Secret/exporter-token", "ServiceAccount/node-agents"},
    }  # fmt: skip
    for name, created in users.items():
        assert unresolved(renders[name], frozenset(created)) == [], name


def _pod(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    spec: dict[str, Any] = one(objects, kind, name)["spec"]["template"]["spec"]
    return spec


def test_every_value_shows_in_what_is_rendered(renders: dict[str, list[dict[str, Any]]]) -> None:
    objects = renders["everything"]
    values = _values("everything")
    for obj in objects:
        if obj["metadata"]["name"] in ("gpu-pulse-site", "gpu-pulse-notes"):
            continue  # extraObjects: the user's own, as written
        assert obj["metadata"]["labels"]["team"] == "platform", f"commonLabels on {obj['kind']}"
    exporter = _pod(objects, "DaemonSet", "gpu-pulse-exporter")
    adapter = _pod(objects, "Deployment", "gpu-pulse-adapter")
    (e,) = exporter["containers"]
    (a,) = adapter["containers"]
    assert e["image"] == f"registry.example.com/team/gpu-pulse-exporter@{values['exporter']['image']['digest']}"
    assert a["image"] == f"registry.example.com/team/gpu-pulse-adapter@{values['adapter']['image']['digest']}"
    for pod in (exporter, adapter):
        assert pod["imagePullSecrets"] == [{"name": "registry-credentials"}, {"name": "old-style-secret"}]
    templates = {
        kind: one(objects, kind, name)["spec"]["template"]["metadata"]
        for kind, name in (("DaemonSet", "gpu-pulse-exporter"), ("Deployment", "gpu-pulse-adapter"))
    }
    assert templates["DaemonSet"]["labels"]["example.com/tier"] == "node-agent"
    assert templates["Deployment"]["labels"]["example.com/tier"] == "control"
    assert templates["DaemonSet"]["annotations"].items() >= {"example.com/scraped-by": "vmagent"}.items()
    # KEDA's callers: a client certificate from the CA of the Secret named, its user bound per namespace by hand
    assert "--keda-client-ca-file=/var/run/gpu-pulse-adapter/keda-client-ca/ca.pem" in a["args"]
    (keda_ca,) = [v["secret"] for v in adapter["volumes"] if v["name"] == "keda-client-ca"]
    assert keda_ca["secretName"] == "corp-keda-ca" and keda_ca["items"] == [{"key": "ca.pem", "path": "ca.pem"}]
    assert not find(objects, "ClusterRoleBinding", "gpu-pulse-keda-scaler")
    # the exporter: HTTPS and basic auth from Secrets, its priority class, extra volumes
    assert "--tls-cert-file=/var/run/gpu-pulse-exporter/tls/tls.crt" in e["args"]
    assert "--tls-private-key-file=/var/run/gpu-pulse-exporter/tls/tls.key" in e["args"]
    assert "--auth-basic-file=/var/run/secrets/gpu-pulse/auth/auth" in e["args"]
    # engines: read, every 2 s, with the pod watch that finds them
    assert {"--engines", "--engine-interval=2", "--kubernetes"} <= set(e["args"])
    pods_rule = one(objects, "ClusterRole", "gpu-pulse-exporter")["rules"][0]
    assert pods_rule["resources"] == ["pods"] and set(pods_rule["verbs"]) == {"get", "list", "watch"}
    volumes = {v["name"]: v for v in exporter["volumes"]}
    mounts = {m["name"]: m["mountPath"] for m in e["volumeMounts"]}
    assert (
        volumes["tls"]["secret"]["secretName"] == "exporter-tls" and mounts["tls"] == "/var/run/gpu-pulse-exporter/tls"
    )
    assert volumes["auth"]["secret"]["secretName"] == "exporter-basic-auth"
    assert mounts["auth"] == "/var/run/secrets/gpu-pulse/auth"
    assert volumes["site-config"] == {"name": "site-config", "configMap": {"name": "gpu-pulse-site"}}
    assert mounts["site-config"] == "/etc/gpu-pulse"
    assert e["readinessProbe"]["httpGet"]["scheme"] == e["livenessProbe"]["httpGet"]["scheme"] == "HTTPS"
    assert exporter["priorityClassName"] == "gpu-pulse-critical"
    # the GPU Operator's pause protocol, on a label of the user's choice, beside the user's own nodeSelector
    assert exporter["nodeSelector"] == {"node-role.example.com/gpu": "true", "nvidia.com/gpu.deploy.operands": "true"}
    # the alerts' runbook links under the user's base
    rule = one(objects, "PrometheusRule", "gpu-pulse")
    urls = [r["annotations"]["runbook_url"] for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r]
    assert urls and all(u.startswith("https://wiki.example.com/gpu/runbooks#gpu") for u in urls)
    # the adapter: host network, spread over zones (its own pods), extra volumes, its PodDisruptionBudget
    assert adapter["hostNetwork"] is True and adapter["dnsPolicy"] == "ClusterFirstWithHostNet"
    (spread,) = adapter["topologySpreadConstraints"]
    assert spread["topologyKey"] == "topology.kubernetes.io/zone"
    assert spread["labelSelector"] == {"matchLabels": {"app.kubernetes.io/name": "gpu-pulse-adapter"}}
    assert {m["name"]: m["mountPath"] for m in a["volumeMounts"]}["metrics-config"] == "/etc/gpu-pulse-adapter"
    assert one(objects, "PodDisruptionBudget", "gpu-pulse-adapter")["spec"]["minAvailable"] == 2
    # the monitors: the exporters' a PodMonitor (podMonitor.enabled), the adapter's a ServiceMonitor; in their
    # namespace, labelled, relabelled; the exporter's over HTTPS
    monitors = find(objects, "ServiceMonitor") + find(objects, "PodMonitor")
    assert [(m["kind"], m["metadata"]["name"]) for m in monitors] == [
        ("ServiceMonitor", "gpu-pulse-adapter"),
        ("PodMonitor", "gpu-pulse-exporter"),
    ]
    for monitor in monitors:
        assert monitor["metadata"]["namespace"] == "monitoring"
        assert monitor["metadata"]["labels"].items() >= {"release": "kube-prometheus-stack", "team": "platform"}.items()
        (endpoint,) = monitor["spec"].get("endpoints") or monitor["spec"]["podMetricsEndpoints"]
        assert endpoint["relabelings"][-1] == values["serviceMonitor"]["relabelings"][0]
        assert endpoint["metricRelabelings"] == values["serviceMonitor"]["metricRelabelings"]
    # the job names the rules select (tests/deploy/test_chart_names.py: whatever the names)
    assert scrape_jobs(objects) == {"ServiceMonitor/gpu-pulse-adapter": {DEFAULT_ADAPTER_JOB},
                                    "PodMonitor/gpu-pulse-exporter": {DEFAULT_EXPORTER_JOB}}  # fmt: skip
    (exporter_endpoint,) = one(objects, "PodMonitor", "gpu-pulse-exporter")["spec"]["podMetricsEndpoints"]
    assert exporter_endpoint["honorLabels"] is True and exporter_endpoint["port"] == "metrics"
    assert exporter_endpoint["scheme"] == "https"
    assert exporter_endpoint["tlsConfig"] == values["serviceMonitor"]["exporterTlsConfig"]
    (adapter_endpoint,) = one(objects, "ServiceMonitor", "gpu-pulse-adapter")["spec"]["endpoints"]
    assert adapter_endpoint["tlsConfig"]["ca"]["secret"]["name"] == "gpu-pulse-adapter-ca", "a CA copy, not the key"
    # the scrapers the NetworkPolicy admits
    (rule,) = one(objects, "NetworkPolicy", "gpu-pulse-exporter")["spec"]["ingress"]
    assert rule["ports"] == [{"port": "metrics", "protocol": "TCP"}]
    assert rule["from"][1:] == [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "observability"}},
         "podSelector": {"matchLabels": {"app.kubernetes.io/name": "vmagent"}}},
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "grafana"}},
         "podSelector": {"matchLabels": {"app.kubernetes.io/name": "alloy"}}},
        {"ipBlock": {"cidr": "10.0.0.0/16"}},
    ]  # fmt: skip


def test_the_values_teams_template_show_in_what_is_rendered(renders: dict[str, list[dict[str, Any]]]) -> None:
    """Service accounts, merged security contexts and probes, the Service, the collectors file, pod labels on
    series, the adapter's rollout and metrics configuration, extra objects."""
    objects = renders["everything"]
    values = _values("everything")
    daemonset = one(objects, "DaemonSet", "gpu-pulse-exporter")
    deployment = one(objects, "Deployment", "gpu-pulse-adapter")
    exporter, adapter = daemonset["spec"]["template"]["spec"], deployment["spec"]["template"]["spec"]
    (e,), (a,) = exporter["containers"], adapter["containers"]
    assert daemonset["spec"]["revisionHistoryLimit"] == 5 and deployment["spec"]["revisionHistoryLimit"] == 3
    assert deployment["spec"]["strategy"] == values["adapter"]["strategy"]
    # service accounts, named and annotated, and the RBAC that binds them
    assert exporter["serviceAccountName"] == "gpu-node-agent" and adapter["serviceAccountName"] == "gpu-metrics-api"
    accounts = {"gpu-node-agent": {"example.com/owner": "platform"},
                "gpu-metrics-api": values["adapter"]["serviceAccount"]["annotations"]}  # fmt: skip
    for name, notes in accounts.items():
        assert one(objects, "ServiceAccount", name)["metadata"]["annotations"] == notes
    subjects = {s["name"] for b in find(objects, "ClusterRoleBinding") for s in b["subjects"]}
    assert {"gpu-node-agent", "gpu-metrics-api"} <= subjects
    assert not find(objects, "ServiceAccount", "gpu-pulse-exporter") and not find(objects, "ServiceAccount",
                                                                                   "gpu-pulse-adapter")  # fmt: skip
    # security contexts and probes: the user's keys merged over the chart's
    assert exporter["securityContext"]["supplementalGroups"] == [44] and exporter["securityContext"]["runAsUser"] == 0
    assert e["securityContext"]["seLinuxOptions"] == {"type": "spc_t"}
    assert e["securityContext"]["readOnlyRootFilesystem"] is True and e["securityContext"]["capabilities"]["add"] == [
        "SYS_ADMIN"
    ]
    assert adapter["securityContext"]["runAsUser"] == 10001 and adapter["securityContext"]["runAsNonRoot"] is True
    assert a["securityContext"]["seLinuxOptions"] == {"level": "s0:c123,c456"}
    assert e["livenessProbe"]["periodSeconds"] == 20 and e["livenessProbe"]["failureThreshold"] == 6
    assert e["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics", "scheme": "HTTPS"}
    assert e["readinessProbe"]["timeoutSeconds"] == 5 and e["readinessProbe"]["periodSeconds"] == 5
    assert a["livenessProbe"]["periodSeconds"] == 30 and a["readinessProbe"]["failureThreshold"] == 5
    assert a["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "https", "scheme": "HTTPS"}
    # the exporters' Service
    service = one(objects, "Service", "gpu-pulse-exporter")
    assert service["metadata"]["annotations"] == {"example.com/scrape": "false"}
    assert service["spec"]["clusterIP"] == "None"
    # the collectors file, and pod labels on series (which need the API)
    collectors = one(objects, "ConfigMap", "gpu-pulse-exporter-collectors")
    assert collectors["metadata"]["namespace"] == "gpu-metrics"
    assert collectors["data"] == {"collectors": values["exporter"]["collectors"]}
    assert "--collectors=/etc/gpu-pulse-exporter/collectors/collectors" in e["args"]
    assert {m["name"]: m["mountPath"] for m in e["volumeMounts"]}["collectors"] == "/etc/gpu-pulse-exporter/collectors"
    assert "checksum/collectors" in daemonset["spec"]["template"]["metadata"]["annotations"]
    assert "--pod-labels=app|team" in e["args"] and "--kubernetes" in e["args"]
    # the adapter's metrics, which the adapter's own parser accepts (bearer-token.yaml: everything.yaml's --config is
    # prometheus-adapter's rules, and one file holds one format)
    configured = renders["bearer-token"]
    config = one(configured, "ConfigMap", "gpu-pulse-adapter-config")
    parsed = parse_metrics_config(config["data"]["config.yaml"])
    assert [m.name for m in parsed.metrics] == ["gpu_utilization"]
    assert [m.name for m in parsed.external] == ["namespace_gpu_memory_used_bytes"]
    assert [d.name for d in parsed.demand] == ["inference_pending_requests"]
    configured_deployment = one(configured, "Deployment", "gpu-pulse-adapter")
    (c,) = configured_deployment["spec"]["template"]["spec"]["containers"]
    assert "--config=/etc/gpu-pulse-adapter/config/config.yaml" in c["args"]
    assert "checksum/config" in configured_deployment["spec"]["template"]["metadata"]["annotations"]
    with pytest.raises(Exception, match=r"adapter\.config and rules both"):
        helm_render({"adapter": {"config": {"metrics": []}}, "rules": {"default": True}})
    # extra objects, maps and templated strings alike
    assert one(objects, "ConfigMap", "gpu-pulse-site")["data"] == {"release": "gpu-pulse"}
    assert one(objects, "ConfigMap", "gpu-pulse-notes")["metadata"]["namespace"] == NAMESPACE


def test_multi_cluster_dashboards_are_what_the_generator_writes_for_several_clusters(
    renders: dict[str, list[dict[str, Any]]],
) -> None:
    """dashboards.multiCluster: each board as `python -m dashboards.generate --multi-cluster` writes it."""
    boards = render_all_boards(multi_cluster=True).items()
    generated = {path.name: json.loads(text) for path, text in boards if path.suffix == ".json"}
    maps = [m for m in find(renders["everything"], "ConfigMap") if m["metadata"]["name"].endswith("-dashboard")]
    assert maps
    for board in maps:
        ((name, text),) = board["data"].items()
        assert json.loads(text) == generated[name], name


def test_defaults_of_the_values_teams_template_render_as_before() -> None:
    """Unset, the new values change nothing: the chart's own security contexts and probes, its account names, a
    headless Service, no collectors file or metrics configuration."""
    objects = helm_render({})
    exporter = one(objects, "DaemonSet", "gpu-pulse-exporter")["spec"]["template"]["spec"]
    (e,) = exporter["containers"]
    assert exporter["securityContext"] == {"runAsUser": 0, "runAsGroup": 0, "runAsNonRoot": False,
                                           "seccompProfile": {"type": "RuntimeDefault"}}  # fmt: skip
    assert e["livenessProbe"] == {"httpGet": {"path": "/healthz", "port": "metrics"}, "periodSeconds": 10,
                                  "timeoutSeconds": 2, "failureThreshold": 3}  # fmt: skip
    assert exporter["serviceAccountName"] == "gpu-pulse-exporter"
    assert not [a for a in e["args"] if a.startswith(("--collectors", "--pod-labels", "--kubernetes"))]
    assert not find(objects, "ConfigMap", "gpu-pulse-adapter-config") and not find(objects, "PodMonitor")
    assert one(objects, "Service", "gpu-pulse-exporter")["spec"]["clusterIP"] == "None"


def test_a_bearer_token_secret_is_shown_by_the_adapter(renders: dict[str, list[dict[str, Any]]]) -> None:
    objects = renders["bearer-token"]
    exporter = _pod(objects, "DaemonSet", "gpu-pulse-exporter")
    adapter = _pod(objects, "Deployment", "gpu-pulse-adapter")
    assert "--auth-bearer-token-file=/var/run/secrets/gpu-pulse/auth/token" in exporter["containers"][0]["args"]
    assert {v["name"]: v for v in exporter["volumes"]}["auth"]["secret"]["secretName"] == "exporter-token"
    assert "--exporter-token-file=/var/run/secrets/gpu-pulse/exporter-token/token" in adapter["containers"][0]["args"]
    token = {v["name"]: v for v in adapter["volumes"]}["exporter-token"]
    assert token["secret"]["secretName"] == "exporter-token" and token["secret"]["items"] == [
        {"key": "token", "path": "token"}
    ]
    assert not find(objects, "ClusterRole", "gpu-pulse-exporter-tokenreview"), "no TokenReviews without the check"
    # an exporter ServiceAccount of the user's, a Service reachable from outside the cluster
    assert exporter["serviceAccountName"] == "node-agents" and not find(objects, "ServiceAccount", "node-agents")
    service = one(objects, "Service", "gpu-pulse-exporter")["spec"]
    assert service["type"] == "LoadBalancer" and "clusterIP" not in service


@pytest.mark.parametrize(
    ("replicas", "budget", "rendered"),
    [(1, {"minAvailable": 1}, None), (2, {"minAvailable": 1}, 1), (2, {"minAvailable": 2}, None),
     (3, {"minAvailable": "50%"}, "50%"), (2, None, None)],
)  # fmt: skip
def test_no_pod_disruption_budget_that_blocks_every_drain(replicas: int, budget: Any, rendered: Any) -> None:
    objects = helm_render({"adapter": {"replicas": replicas, "podDisruptionBudget": budget}})
    budgets = find(objects, "PodDisruptionBudget")
    assert [b["spec"]["minAvailable"] for b in budgets] == ([] if rendered is None else [rendered])


def test_the_default_scrapers_and_priority() -> None:
    objects = helm_render({})
    (rule,) = one(objects, "NetworkPolicy", "gpu-pulse-exporter")["spec"]["ingress"]
    scrapers = {p["podSelector"]["matchLabels"]["app.kubernetes.io/name"] for p in rule["from"][1:]}
    assert scrapers == {"prometheus", "vmagent", "alloy", "opentelemetry-collector"}
    assert {json.dumps(p["namespaceSelector"]) for p in rule["from"][1:]} == {
        json.dumps({"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}})
    }
    assert _pod(objects, "DaemonSet", "gpu-pulse-exporter")["priorityClassName"] == "system-node-critical"
    assert "priorityClassName" not in _pod(helm_render({"exporter": {"priorityClassName": ""}}), "DaemonSet",
                                           "gpu-pulse-exporter")  # fmt: skip


@pytest.mark.parametrize(
    ("values", "names"),
    [
        ({"nameOverride": "GPU"}, ["nameOverride"]),
        ({"fullnameOverride": "my.release"}, ["fullnameOverride"]),
        ({"commonLabels": {"gpu-pulse.dev/job": "gpu"}}, ["commonLabels"]),
        ({"exporter": {"podLabels": {"gpu-pulse.dev/job": "gpu"}}}, ["podLabels"]),
        ({"exporter": {"image": {"repository": "gpu-pulse-exporter", "digest": "sha256:abc"}}}, ["digest"]),
        ({"imagePullSecrets": ["registry-credentials"]}, ["imagePullSecrets"]),
        ({"networkPolicy": {"scrapers": [{"name": "x", "cidr": "10.0.0.0/8", "podLabels": {"a": "b"}}]}}, ["scrapers"]),
        ({"networkPolicy": {"scrapers": [{"name": "x"}]}}, ["scrapers"]),
        ({"serviceMonitor": {"relabelings": [{"action": "rename"}]}}, ["relabelings"]),
        ({"adapter": {"topologySpreadConstraints": [{"maxSkew": 1}]}}, ["topologySpreadConstraints"]),
        ({"adapter": {"hostNetwork": "yes"}}, ["hostNetwork"]),
        ({"commonLabels": {"app.kubernetes.io/part-of": "ml"}}, ["commonLabels"]),
        ({"adapter": {"podLabels": {"app.kubernetes.io/name": "x"}}}, ["podLabels"]),
        ({"networkPolicy": {"prometheusPodLabels": {"app": "prometheus"}}}, ["prometheusPodLabels"]),
    ],
)
def test_the_schema_refuses_wrong_values(values: dict[str, Any], names: list[str]) -> None:
    with helm_python.Chart.load(str(CHART)) as chart:
        with pytest.raises(helm_python.HelmValuesError) as refused:
            chart.validate_schema(chart.merge_values(values))
    for name in names:
        assert name in str(refused.value), str(refused.value)


@pytest.mark.parametrize(
    ("values", "says"),
    [
        ({"exporter": {"auth": {"bearerTokenSecret": "t"}}}, "exclude each other"),
        ({"exporter": {"auth": {"enabled": False, "bearerTokenSecret": "t", "basicAuthSecret": "b"}}},
         "exclude each other"),
        ({"exporter": {"auth": {"enabled": False, "basicAuthSecret": "b"}}}, "adapter.source=prometheus"),
        ({"exporter": {"tls": {"secretName": "exporter-tls"}}}, "pod IP"),
    ],
)  # fmt: skip
def test_choices_the_exporter_or_the_adapter_cannot_follow_are_refused(values: dict[str, Any], says: str) -> None:
    with pytest.raises(helm_python.HelmError, match=says):
        helm_render(values)


def test_the_packaged_chart_lints_and_renders_the_same(tmp_path: Path) -> None:
    """`helm package`: the archive Helm writes lints strictly and renders the same objects as the directory."""
    archive = helm_python.package(str(CHART), destination=str(tmp_path))
    assert Path(archive).name == "gpu-pulse-0.1.0.tgz"
    report = helm_python.lint(archive, strict=True, namespace=NAMESPACE)
    assert report["errors"] == [] and [m for m in report["messages"] if m["severity"] >= 2] == [], report
    values = _values("bearer-token") | {"certManager": {"enabled": True}}  # no generated certificate: comparable
    with helm_python.Chart.load(archive) as packaged:
        rendered = packaged.render(values, name="gpu-pulse", namespace=NAMESPACE, is_install=True)
    from_archive = [d for p, t in sorted(rendered.items()) if p.endswith(".yaml") for d in yaml.safe_load_all(t) if d]
    assert from_archive == helm_render(values)


def test_notes_name_the_admitted_scrapers_and_what_the_choices_need() -> None:
    path = "gpu-pulse/templates/NOTES.txt"
    with helm_python.Chart.load(str(CHART)) as chart:
        defaults = chart.render({}, name="gpu-pulse", namespace=NAMESPACE, is_install=True)[path]
        everything = chart.render(_values("everything"), name="gpu-pulse", namespace=NAMESPACE, is_install=True)[path]
    assert (
        "- vmagent: pods app.kubernetes.io/name=vmagent in namespaces kubernetes.io/metadata.name=monitoring"
        in defaults
    )
    assert "image.registry is empty" in defaults and "image.registry is empty" not in everything
    assert "- nodes: addresses 10.0.0.0/16" in everything
    assert "pod-security.kubernetes.io/enforce=privileged --overwrite" in everything
    assert "pod-security.kubernetes.io/enforce=privileged --overwrite" not in defaults
    assert "engines.enabled: each exporter watches its node's pods" in everything
    assert "engines.enabled" not in defaults


def test_the_crd_referee_is_live(renders: dict[str, list[dict[str, Any]]]) -> None:
    """A misspelt ServiceMonitor field, or a wrong duration, fails the Prometheus Operator's own model."""
    monitor = json.loads(json.dumps(one(renders["everything"], "ServiceMonitor", "gpu-pulse-adapter")))
    monitor["spec"]["endpoints"][0]["honourLabels"] = True
    with pytest.raises(AssertionError, match="does not know"):
        validate_custom(monitor)
    monitor = json.loads(json.dumps(one(renders["everything"], "ServiceMonitor", "gpu-pulse-adapter")))
    monitor["spec"]["endpoints"][0]["interval"] = "15 seconds"
    with pytest.raises(ValueError):
        validate_custom(monitor)


def test_where_the_gpu_operator_runs_the_exporter_waits_for_its_toolkit_validation(
    renders: dict[str, list[dict[str, Any]]],
) -> None:
    """As the operator's own operands do (gpu-operator assets/state-dcgm-exporter/0800_daemonset.yaml: init container
    `toolkit-validation` waiting for /run/nvidia/validations/toolkit-ready); not without the operator's label."""
    operator = {"gpuOperator": {"pauseProtocol": True}}
    exporter = _pod(helm_render({**operator, "toolkitValidation": {"path": "/run/nvidia-alt/validations"}}),
                    "DaemonSet", "gpu-pulse-exporter")  # fmt: skip
    (wait,) = exporter["initContainers"]
    assert wait["name"] == "toolkit-validation" and "toolkit-ready" in wait["args"][0]
    assert wait["securityContext"]["privileged"] is False and wait["securityContext"]["capabilities"]["drop"] == ["ALL"]
    (mount,) = wait["volumeMounts"]
    assert mount["mountPath"] == "/run/nvidia/validations" and mount["readOnly"] is True
    volume = {v["name"]: v for v in exporter["volumes"]}[mount["name"]]
    assert volume["hostPath"]["path"] == "/run/nvidia-alt/validations"
    assert "initContainers" not in _pod(helm_render({}), "DaemonSet", "gpu-pulse-exporter")  # no operator: no wait
    off = helm_render({**operator, "toolkitValidation": {"enabled": False}})
    assert "initContainers" not in _pod(off, "DaemonSet", "gpu-pulse-exporter")


def test_the_kernel_log_comes_through_a_privileged_relay_not_a_privileged_exporter(
    renders: dict[str, list[dict[str, Any]]],
) -> None:
    exporter = _pod(renders["bearer-token"], "DaemonSet", "gpu-pulse-exporter")
    main, relay = exporter["containers"]
    assert main["name"] == "exporter" and relay["name"] == "kmsg-relay"
    assert main["securityContext"]["privileged"] is False and relay["securityContext"]["privileged"] is True
    assert "ports" not in relay and "/dev/kmsg" in relay["args"][0]
    env = {e["name"]: e.get("value") for e in main["env"]}
    assert env["GPU_PULSE_KERNEL_LOG"] == "/var/run/gpu-pulse/kernel-log/xid"
    shared = {m["name"]: m for m in main["volumeMounts"]}["kernel-log"]
    assert shared["readOnly"] is True and {m["name"] for m in relay["volumeMounts"]} == {"kernel-log"}
    assert "emptyDir" in {v["name"]: v for v in exporter["volumes"]}["kernel-log"]
    default = _pod(renders["everything"], "DaemonSet", "gpu-pulse-exporter")
    assert [c["name"] for c in default["containers"]] == ["exporter"]


def test_prometheus_adapter_rules_are_served_as_its_chart_writes_them(renders: dict[str, list[dict[str, Any]]]) -> None:
    # the values `rules` of prometheus-adapter's chart: its default rules, then rules.custom, under `rules`;
    # rules.external under `externalRules` (prometheus-community/helm-charts charts/prometheus-adapter configmap.yaml)
    objects = renders["everything"]
    values = _values("everything")
    text = one(objects, "ConfigMap", "gpu-pulse-adapter-rules")["data"]["config.yaml"]
    config = parse_prom_adapter_config(load_document(text, "config.yaml"), "config.yaml")
    document = yaml.safe_load(text)
    # the six default rules of prometheus-adapter's chart, then the custom one
    assert [rule["name"]["matches"] for rule in document["rules"]] == [
        "^container_(.*)_seconds_total$", "^container_(.*)_total$", "^container_(.*)$", "", "^(.*)_total$",
        "^(.*)_seconds_total$", "^(.*)_total",
    ]  # fmt: skip
    assert document["rules"][-1] == values["rules"]["custom"][0]
    assert document["externalRules"] == values["rules"]["external"]
    assert len(config.rules) == 7 and len(config.external_rules) == 1
    namers_from_config([*config.rules, *config.external_rules], RestMapper())  # accepted as the adapter reads it
    adapter = _pod(objects, "Deployment", "gpu-pulse-adapter")
    (a,) = adapter["containers"]
    assert "--config=/etc/gpu-pulse-adapter-rules/config.yaml" in a["args"]
    assert {m["name"]: m["mountPath"] for m in a["volumeMounts"]}["rules"] == "/etc/gpu-pulse-adapter-rules"
    assert {v["name"]: v for v in adapter["volumes"]}["rules"]["configMap"]["name"] == "gpu-pulse-adapter-rules"
    # without rules: no ConfigMap, no --config; with rules and the direct source: the Prometheus URL is passed
    plain = helm_render({})
    assert not find(plain, "ConfigMap", "gpu-pulse-adapter-rules")
    direct = helm_render({"rules": {"default": True}, "adapter": {"prometheusUrl": "http://prometheus:9090"}})
    (d,) = _pod(direct, "Deployment", "gpu-pulse-adapter")["containers"]
    assert "--prometheus-url=http://prometheus:9090" in d["args"] and "--source=direct" in d["args"]
