"""docs/install.md's cluster flavours, followed literally: in each flavour's section, every values file and manifest
(a fenced yaml block whose first line is `# <file name>`) is written out, every `helm install` / `helm upgrade` of the
chart is rendered by Helm's engine with exactly the options it is given (`-f`, `--set`, `--reuse-values`, ...), every
`kubectl apply -k` is rendered by kubectl, every `kubectl apply -f` of a written file is validated; each rendering
validates (kubernetes-validate, the CRDs' models of tests/deploy/crds.py) and holds the invariants shared with
kustomize. An option the test does not know fails it, so the documentation cannot drift into commands nobody ran."""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.crds import validate
from tests.deploy.invariants import check_all
from tests.deploy.rendering import CHART, REPO, kustomize, one, require_helm
from tests.deploy.schemas import VERSIONS
from tests.support.tools import require_tool

helm_python = require_helm()

INSTALL = REPO / "docs" / "install.md"
FLAVOURS = ("EKS", "GKE", "AKS", "OpenShift", "k3s, k0s and MicroK8s")
_FENCE = re.compile(r"^```(\w+)\n(.*?)^```", re.MULTILINE | re.DOTALL)


def _section(text: str, heading: str) -> str:
    """The text under `### heading`, up to the next heading of level 2 or 3."""
    match = re.search(rf"^### {re.escape(heading)}\n(.*?)(?=^##)", text, re.MULTILINE | re.DOTALL)
    assert match, f"docs/install.md has no section '### {heading}'"
    return match.group(1)


def _blocks(section: str) -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for m in _FENCE.finditer(section)]


def _commands(script: str) -> list[list[str]]:
    """A shell block's commands: continuation lines joined, comments dropped, `&&` split."""
    joined = script.replace("\\\n", " ")
    commands = []
    for line in joined.splitlines():
        words = shlex.split(line, comments=True)
        while words:
            if "&&" in words:
                cut = words.index("&&")
                commands.append(words[:cut])
                words = words[cut + 1 :]
            else:
                commands.append(words)
                words = []
    return commands


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


# helm's parsers of each value option, in the order Helm merges them (values files first, then these)
_SETTERS = {
    "--set-json": helm_python.parse_set_json,
    "--set": helm_python.parse_set_string,
    "--set-string": helm_python.parse_set_string_values,
}
_FLAGS = {"--create-namespace", "--reuse-values"}


def _helm(words: list[str], files: Path, previous: dict[str, Any]) -> tuple[str, str, dict[str, Any]]:
    """A `helm install|upgrade NAME CHART ...` command as (release, namespace, values)."""
    positional: list[str] = []
    namespace = "default"
    value_files: list[str] = []
    sets: dict[str, list[str]] = {option: [] for option in _SETTERS}
    reuse = False
    rest = iter(words[2:])
    for word in rest:
        option, has_value, inline = word.partition("=")
        if option in ("-n", "--namespace"):
            namespace = inline if has_value else next(rest)
        elif option in ("-f", "--values"):
            value_files.append(inline if has_value else next(rest))
        elif option in _SETTERS:
            sets[option].append(inline if has_value else next(rest))
        elif option in _FLAGS:
            reuse = reuse or option == "--reuse-values"
        elif word.startswith("-"):
            raise AssertionError(f"an option the test does not follow: {word} in {shlex.join(words)}")
        else:
            positional.append(word)
    assert len(positional) == 2, f"helm {words[1]} NAME CHART: {shlex.join(words)}"
    release, chart = positional
    assert chart == "deploy/helm/gpu-pulse", chart
    values = previous if reuse else {}
    for name in value_files:
        values = _merge(values, helm_python.values_from_yaml((files / name).read_text(encoding="utf-8")))
    for option, parse in _SETTERS.items():
        for expression in sets[option]:
            values = _merge(values, parse(expression))
    return release, namespace, values


def _validate(objects: list[dict[str, Any]]) -> None:
    for obj in objects:
        for version in VERSIONS:
            validate(obj, version)


def _check(objects: list[dict[str, Any]], namespace: str) -> None:
    exporter = one(objects, "DaemonSet", "gpu-pulse-exporter")
    adapter = one(objects, "Deployment", "gpu-pulse-adapter")["spec"]["template"]["spec"]
    args = exporter["spec"]["template"]["spec"]["containers"][0]["args"]
    check_all(
        objects,
        namespace,
        exporter["metadata"]["namespace"],
        exporter_auth=any(a.startswith("--auth-allowed-users=") for a in args),
        adapter_host_network=adapter.get("hostNetwork", False),
    )


def follow(section: str, workdir: Path) -> list[tuple[str, list[dict[str, Any]]]]:
    """Writes the section's files into workdir (beside links to the repository's deploy/, rules/, dashboards/), runs
    its renders, and returns each with what it rendered."""
    workdir.mkdir(parents=True, exist_ok=True)
    for part in ("deploy", "rules", "dashboards"):
        if not (workdir / part).exists():
            (workdir / part).symlink_to(REPO / part)
    scripts = []
    for language, body in _blocks(section):
        first = body.splitlines()[0] if body else ""
        if language == "yaml" and first.startswith("# ") and first.endswith(".yaml"):
            path = workdir / first.removeprefix("# ")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(body, encoding="utf-8")
        elif language == "sh":
            scripts.append(body)
    renders: list[tuple[str, list[dict[str, Any]]]] = []
    releases: dict[str, dict[str, Any]] = {}
    for script in scripts:
        for words in _commands(script):
            command = shlex.join(words)
            if words[:2] in (["helm", "install"], ["helm", "upgrade"]):
                release, namespace, values = _helm(words, workdir, releases.get(words[2], {}))
                releases[release] = values
                with helm_python.Chart.load(str(CHART)) as chart:
                    rendered = chart.render(values, name=release, namespace=namespace, is_install=True)
                objects = [
                    doc
                    for path, text in sorted(rendered.items())
                    if path.endswith(".yaml")
                    for doc in yaml.safe_load_all(text)
                    if doc
                ]
                _validate(objects)
                _check(objects, namespace)
                renders.append((command, objects))
            elif words[:3] == ["kubectl", "apply", "-k"]:
                objects = kustomize(require_tool("kubectl"), workdir / words[3])
                _validate(objects)
                _check(objects, "gpu-pulse")
                renders.append((command, objects))
            elif words[:3] == ["kubectl", "apply", "-f"]:
                objects = [d for d in yaml.safe_load_all((workdir / words[3]).read_text(encoding="utf-8")) if d]
                _validate(objects)
                renders.append((command, objects))
    return renders


@pytest.fixture(scope="module")
def text() -> str:
    return INSTALL.read_text(encoding="utf-8")


def test_every_flavour_has_a_section(text: str) -> None:
    flavours = _section(text, "EKS")  # the first; the others follow it under "## Cluster flavours"
    assert flavours
    start = text.index("## Cluster flavours")
    headings = re.findall(r"^### (.+)$", text[start : text.index("\n## ", start + 1)], re.MULTILINE)
    assert tuple(headings) == FLAVOURS


Followed = list[tuple[str, list[dict[str, Any]]]]


@pytest.fixture(scope="module")
def followed(text: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Followed | Exception]:
    """Each flavour's section followed once for the tests below (rendering is most of their time): what it rendered,
    or what following it raised, which the flavour's own test raises again."""
    results: dict[str, Followed | Exception] = {}
    for flavour in FLAVOURS:
        try:
            results[flavour] = follow(_section(text, flavour), tmp_path_factory.mktemp(re.sub(r"\W+", "-", flavour)))
        except Exception as error:
            results[flavour] = error
    return results


def _followed(followed: dict[str, Followed | Exception], flavour: str) -> Followed:
    result = followed[flavour]
    if isinstance(result, Exception):
        raise result
    return result


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_each_flavour_renders_and_validates_as_documented(
    followed: dict[str, Followed | Exception], flavour: str
) -> None:
    renders = _followed(followed, flavour)
    assert [c for c, _ in renders if c.startswith("helm ")], f"{flavour}: no helm command rendered"


def _exporter(objects: list[dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = one(objects, "DaemonSet", "gpu-pulse-exporter")["spec"]["template"]["spec"]
    return spec


def test_what_each_flavour_changes_is_rendered(followed: dict[str, Followed | Exception]) -> None:
    """The flavour-specific choices the prose promises are in the objects its commands render."""
    results = {f: _followed(followed, f) for f in FLAVOURS}
    # EKS: no RuntimeClass, GPU nodes by Karpenter's or Auto Mode's labels; then the adapter on the host network
    (_, install), (_, overlay_cni) = [r for r in results["EKS"] if r[0].startswith("helm ")]
    exporter = _exporter(install)
    assert "runtimeClassName" not in exporter and "nodeSelector" not in exporter
    terms = exporter["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert {t["matchExpressions"][0]["key"] for t in terms} >= {"karpenter.k8s.aws/instance-gpu-manufacturer"}
    adapter = one(overlay_cni, "Deployment", "gpu-pulse-adapter")["spec"]["template"]["spec"]
    assert adapter["hostNetwork"] is True and "--listen=0.0.0.0:10443" in adapter["containers"][0]["args"]
    assert (
        one(install, "ServiceMonitor", "gpu-pulse-exporter")["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    )
    # GKE: a quota admitting system-node-critical in the exporter's namespace; Managed Prometheus admitted
    (quota,) = [o for _, objs in results["GKE"] for o in objs if o["kind"] == "ResourceQuota"]
    (_, gke), *_ = [r for r in results["GKE"] if r[0].startswith("helm ")]
    assert quota["metadata"]["namespace"] == one(gke, "DaemonSet", "gpu-pulse-exporter")["metadata"]["namespace"]
    assert quota["spec"]["scopeSelector"]["matchExpressions"][0]["values"] == [_exporter(gke)["priorityClassName"]]
    (rule,) = one(gke, "NetworkPolicy", "gpu-pulse-exporter")["spec"]["ingress"]
    assert {"kubernetes.io/metadata.name": "gmp-system"} in [
        p["namespaceSelector"]["matchLabels"] for p in rule["from"]
    ]
    # AKS: AKS's accelerator label and the node pool's taint
    ((_, aks),) = results["AKS"]
    assert {"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"} in _exporter(aks)["tolerations"]
    # OpenShift: the platform Prometheus admitted, and let read both namespaces
    helm_renders = [objs for c, objs in results["OpenShift"] if c.startswith("helm ")]
    (openshift,) = helm_renders
    (rule,) = one(openshift, "NetworkPolicy", "gpu-pulse-exporter")["spec"]["ingress"]
    namespaces = {p["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"] for p in rule["from"]}
    assert namespaces == {"gpu-pulse", "openshift-monitoring"}
    bound = {o["metadata"]["namespace"] for _, objs in results["OpenShift"] for o in objs if o["kind"] == "RoleBinding"}
    assert {"gpu-pulse", "gpu-pulse-exporter"} <= bound
    # k3s, k0s, MicroK8s: the images loaded as buildah names them, and each kubelet directory
    paths = {
        c.split("--set kubeletPath=")[1].split()[0] if "kubeletPath=" in c else "default": objs
        for c, objs in results["k3s, k0s and MicroK8s"]
        if c.startswith("helm ")
    }
    assert set(paths) == {"default", "/var/lib/k0s/kubelet/pod-resources",
                          "/var/snap/microk8s/common/var/lib/kubelet/pod-resources"}  # fmt: skip
    for path, objs in paths.items():
        volumes = {v["name"]: v for v in _exporter(objs)["volumes"]}
        assert volumes["pod-resources"]["hostPath"]["path"] == (
            "/var/lib/kubelet/pod-resources" if path == "default" else path
        )
    assert _exporter(paths["default"])["containers"][0]["image"] == "localhost/gpu-pulse-exporter:0.1.0"
    (kustomized,) = [objs for c, objs in results["k3s, k0s and MicroK8s"] if c.startswith("kubectl apply -k")]
    assert _exporter(kustomized)["containers"][0]["image"] == "localhost/gpu-pulse-exporter:0.1.0"
    assert "nodeSelector" not in _exporter(kustomized)


def test_an_option_the_test_does_not_follow_fails_it(tmp_path: Path) -> None:
    """The referee is live: a documented command with an option nobody renders is refused."""
    section = "```sh\nhelm install gpu-pulse deploy/helm/gpu-pulse -n gpu-pulse --set-file x=y\n```\n"
    with pytest.raises(AssertionError, match="--set-file"):
        follow(section, tmp_path)


def test_a_wrong_documented_value_fails(tmp_path: Path) -> None:
    section = "```sh\nhelm install gpu-pulse deploy/helm/gpu-pulse -n gpu-pulse --set exporter.runtimeClass=\n```\n"
    with pytest.raises(helm_python.HelmError):
        follow(section, tmp_path)
    assert os.path.islink(tmp_path / "deploy")
