"""`kubectl get` against the Kubernetes API stand-in prints what it prints against kube-apiserver: the server's
meta.k8s.io/v1 Table with each kind's columns (the real kubectl is the referee), and `-o json` still the objects."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from simulation.kubeapi import KubeApiServer
from simulation.kubeapi.objects import hpa_object, hpa_status, node_object, stateful_set_object
from simulation.kubeapi.tables import human_age, wants_table
from simulation.kubeconfig import write_kubeconfig
from tests.support.kubeapi import kube_api_on_a_thread
from tests.support.tools import require_tool


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[KubeApiServer, Path]]:
    with kube_api_on_a_thread() as kube:
        kube.put_pod("ml", "infer-0", node="gpu-1", labels={"app": "infer"}, pod_ip="10.244.0.7", containers=["a", "b"])
        kube.put_pod("ml", "pending-0", labels={"app": "infer"}, phase="Pending")
        kube.put_object(
            "nodes",
            node_object("gpu-1", labels={"node-role.kubernetes.io/gpu": ""}, internal_ip="10.0.0.1"),
        )
        kube.put_deployment("ml", "infer", replicas=3, labels={"app": "infer"})
        kube.put_object("statefulsets", stateful_set_object("ml", "embed", replicas=2, labels={"app": "embed"}))
        hpa = hpa_object("ml", "infer", target=("Deployment", "infer"), metric="gpu_utilization", average_value="60")
        kube.put_object(
            "horizontalpodautoscalers", hpa_status(hpa, current_replicas=3, desired_replicas=4, average="76384m")
        )
        kube.put_object("horizontalpodautoscalers", {**hpa, "metadata": {"name": "cold", "namespace": "ml"}})
        yield kube, write_kubeconfig(tmp_path_factory.mktemp("kube") / "kubeconfig", server=kube.url)


def kubectl(kubeconfig: Path, *args: str) -> list[list[str]]:
    done = subprocess.run(
        [require_tool("kubectl"), "--kubeconfig", str(kubeconfig), *args],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return [line.split() for line in done.stdout.splitlines() if line.strip()]


def by_name(rows: list[list[str]]) -> dict[str, list[str]]:
    return {row[0]: row for row in rows[1:]}


def test_pods_show_readiness_status_restarts_and_with_wide_their_node(cluster: tuple[KubeApiServer, Path]) -> None:
    _, kubeconfig = cluster
    rows = kubectl(kubeconfig, "get", "pods", "-n", "ml")
    assert rows[0] == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert by_name(rows)["infer-0"][1:4] == ["2/2", "Running", "0"]
    assert by_name(rows)["pending-0"][1:3] == ["0/1", "Pending"]
    wide = kubectl(kubeconfig, "get", "pods", "-n", "ml", "-o", "wide")
    assert wide[0][5:8] == ["IP", "NODE", "NOMINATED"]
    assert by_name(wide)["infer-0"][5:7] == ["10.244.0.7", "gpu-1"]
    assert by_name(wide)["pending-0"][5:7] == ["<none>", "<none>"]
    labelled = kubectl(kubeconfig, "get", "pods", "-A", "--show-labels", "-l", "app=infer")
    assert labelled[0][0] == "NAMESPACE" and labelled[0][-1] == "LABELS" and labelled[1][-1] == "app=infer"


def test_nodes_statefulsets_and_deployments(cluster: tuple[KubeApiServer, Path]) -> None:
    _, kubeconfig = cluster
    nodes = kubectl(kubeconfig, "get", "nodes")
    assert nodes[0] == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    assert by_name(nodes)["gpu-1"][1:3] == ["Ready", "gpu"] and by_name(nodes)["gpu-1"][4] == "v1.32.0"
    one = kubectl(kubeconfig, "get", "node", "gpu-1", "-o", "wide")  # a single object is a Table too
    assert one[0][5] == "INTERNAL-IP" and one[1][5] == "10.0.0.1"
    sts = kubectl(kubeconfig, "get", "sts", "-n", "ml")
    assert sts == [["NAME", "READY", "AGE"], ["embed", "2/2", sts[1][2]]]
    deploy = kubectl(kubeconfig, "get", "deploy", "-n", "ml", "-o", "wide")
    assert deploy[0] == ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE", "CONTAINERS", "IMAGES", "SELECTOR"]
    assert by_name(deploy)["infer"][1:4] == ["3/3", "3", "3"] and by_name(deploy)["infer"][-1] == "app=infer"


def test_hpas_show_their_targets_as_kubectl_does(cluster: tuple[KubeApiServer, Path]) -> None:
    _, kubeconfig = cluster
    rows = kubectl(kubeconfig, "get", "hpa", "-n", "ml")
    assert rows[0] == ["NAME", "REFERENCE", "TARGETS", "MINPODS", "MAXPODS", "REPLICAS", "AGE"]
    assert by_name(rows)["infer"][1:6] == ["Deployment/infer", "76384m/60", "1", "10", "3"]
    assert by_name(rows)["cold"][2] == "<unknown>/60"


def test_json_output_is_still_the_objects(cluster: tuple[KubeApiServer, Path]) -> None:
    _, kubeconfig = cluster
    done = subprocess.run(
        [require_tool("kubectl"), "--kubeconfig", str(kubeconfig), "get", "hpa", "-n", "ml", "infer", "-o", "json"],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    hpa = json.loads(done.stdout)
    assert hpa["kind"] == "HorizontalPodAutoscaler" and hpa["status"]["desiredReplicas"] == 4


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (-5, "<invalid>"),
        (0, "0s"),
        (119, "119s"),
        (150, "2m30s"),
        (300, "5m"),
        (3 * 3600 - 1, "179m"),
        (3 * 3600 + 30 * 60, "3h30m"),
        (10 * 3600, "10h"),
        (3 * 86400 + 5 * 3600, "3d5h"),
        (10 * 86400, "10d"),
        (800 * 86400, "2y70d"),
        (9 * 365 * 86400, "9y"),
    ],
)
def test_ages_read_as_kubectl_shows_them(seconds: int, shown: str) -> None:
    assert human_age(seconds) == shown


def test_only_a_request_that_asks_for_a_table_first_gets_one() -> None:
    kubectl_get = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io"
    assert wants_table(kubectl_get + ",application/json")
    assert not wants_table("application/json")
    assert not wants_table("application/json, application/json;as=Table;v=v1;g=meta.k8s.io")
