"""Server-side printing: the `meta.k8s.io/v1` Table that `kubectl get` asks for, with kube-apiserver's columns.

kubectl sends `Accept: application/json;as=Table;v=v1;g=meta.k8s.io, ...`; an answer that is a plain list it prints
as NAME and AGE only. The columns are those kube-apiserver prints for each kind (the column names, their order and
which are `-o wide` only, priority 1, are upstream facts: kubernetes pkg/printers/internalversion/printers.go); the
cells are computed here from the stored objects. An AGE cell is the object's age in kube's short human form (5m10s,
3h, 2d4h).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from simulation.kubeapi.objects import JsonObject

TABLE_MEDIA: Final = "as=table"


def wants_table(accept: str) -> bool:
    """Whether the request's Accept header asks for a meta.k8s.io/v1 Table first (as kubectl get does)."""
    first = accept.split(",")[0].replace(" ", "").lower()
    return TABLE_MEDIA in first.split(";") and "g=meta.k8s.io" in first and "v=v1" in first.split(";")


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    kind: str  # "string" or "integer" (the Table's column type)
    cell: Callable[[JsonObject, datetime], object]
    priority: int = 0  # 1: shown with -o wide only
    format: str = ""  # "name" for the name column


def human_age(seconds: float) -> str:
    """A duration as kube prints ages: seconds under 2 minutes, minutes and seconds under 10 minutes, minutes under 3
    hours, hours and minutes under 8 hours, hours under 2 days, days and hours under 8 days, days under 2 years,
    years and days under 8 years, then years."""
    if seconds < -1:
        return "<invalid>"
    whole = max(int(seconds), 0)
    minutes, hours, days = whole // 60, whole // 3600, whole // 86400
    if whole < 120:
        return f"{whole}s"
    if minutes < 10:
        rest = whole % 60
        return f"{minutes}m{rest}s" if rest else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    if hours < 8:
        rest = minutes % 60
        return f"{hours}h{rest}m" if rest else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        rest = hours % 24
        return f"{days}d{rest}h" if rest else f"{days}d"
    if hours < 24 * 365 * 2:
        return f"{days}d"
    years = days // 365
    if hours < 24 * 365 * 8:
        rest = days % 365
        return f"{years}y{rest}d" if rest else f"{years}y"
    return f"{years}y"


def _age(obj: JsonObject, now: datetime) -> str:
    created = obj["metadata"].get("creationTimestamp")
    if not created:
        return "<unknown>"
    return human_age((now - datetime.fromisoformat(created.replace("Z", "+00:00"))).total_seconds())


def _name(obj: JsonObject, now: datetime) -> str:
    return str(obj["metadata"]["name"])


def _get(obj: Mapping[str, Any], *path: str) -> Any:
    value: Any = obj
    for key in path:
        value = value.get(key) if isinstance(value, Mapping) else None
    return value


def _or_none(value: object) -> str:
    return str(value) if value not in (None, "") else "<none>"


def _containers(obj: JsonObject, now: datetime) -> str:
    return ",".join(c["name"] for c in _get(obj, "spec", "template", "spec", "containers") or ())


def _images(obj: JsonObject, now: datetime) -> str:
    return ",".join(c.get("image", "") for c in _get(obj, "spec", "template", "spec", "containers") or ())


def _selector(obj: JsonObject, now: datetime) -> str:
    labels = _get(obj, "spec", "selector", "matchLabels") or {}
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items())) or "<none>"


def _int(*path: str) -> Callable[[JsonObject, datetime], int]:
    return lambda obj, now: int(_get(obj, *path) or 0)


# ---- pods --------------------------------------------------------------------------------------------------------
def _pod_ready(obj: JsonObject, now: datetime) -> str:
    statuses = _get(obj, "status", "containerStatuses") or ()
    total = len(_get(obj, "spec", "containers") or ())
    return f"{sum(1 for s in statuses if s.get('ready'))}/{total}"


def _pod_status(obj: JsonObject, now: datetime) -> str:
    if obj["metadata"].get("deletionTimestamp"):
        return "Terminating"
    for status in _get(obj, "status", "containerStatuses") or ():
        waiting = _get(status, "state", "waiting", "reason")
        if waiting:
            return str(waiting)
    return str(_get(obj, "status", "reason") or _get(obj, "status", "phase") or "Unknown")


def _restarts(obj: JsonObject, now: datetime) -> int:
    return sum(int(s.get("restartCount") or 0) for s in _get(obj, "status", "containerStatuses") or ())


# ---- nodes -------------------------------------------------------------------------------------------------------
def _node_status(obj: JsonObject, now: datetime) -> str:
    ready = next((c for c in _get(obj, "status", "conditions") or () if c.get("type") == "Ready"), None)
    status = "Ready" if ready is not None and ready.get("status") == "True" else "NotReady"
    if ready is None:
        status = "Unknown"
    return status + (",SchedulingDisabled" if _get(obj, "spec", "unschedulable") else "")


def _roles(obj: JsonObject, now: datetime) -> str:
    prefix = "node-role.kubernetes.io/"
    roles = sorted(key.removeprefix(prefix) for key in obj["metadata"].get("labels") or {} if key.startswith(prefix))
    return ",".join(roles) or "<none>"


def _address(kind: str) -> Callable[[JsonObject, datetime], str]:
    def cell(obj: JsonObject, now: datetime) -> str:
        found = [a["address"] for a in _get(obj, "status", "addresses") or () if a.get("type") == kind]
        return found[0] if found else "<none>"

    return cell


def _node_info(key: str) -> Callable[[JsonObject, datetime], str]:
    return lambda obj, now: _or_none(_get(obj, "status", "nodeInfo", key))


# ---- workloads ---------------------------------------------------------------------------------------------------
def _ready_of_replicas(obj: JsonObject, now: datetime) -> str:
    return f"{int(_get(obj, 'status', 'readyReplicas') or 0)}/{int(_get(obj, 'spec', 'replicas') or 0)}"


def _reference(obj: JsonObject, now: datetime) -> str:
    target = _get(obj, "spec", "scaleTargetRef") or {}
    return f"{target.get('kind', '')}/{target.get('name', '')}"


def _targets(obj: JsonObject, now: datetime) -> str:
    """Each metric of the HPA as current/target, as kubectl shows them (the autoscaling/v2 shapes this server uses:
    Pods and Object metrics with an AverageValue or Value target, Resource metrics with a utilization)."""
    specs = _get(obj, "spec", "metrics") or ()
    statuses = _get(obj, "status", "currentMetrics") or ()
    shown = []
    for index, spec in enumerate(specs):
        kind = str(spec.get("type", ""))
        key = kind[:1].lower() + kind[1:]
        target = _get(spec, key, "target") or {}
        current = _get(statuses[index], key, "current") if index < len(statuses) else None
        if target.get("type") == "Utilization":
            now_value = (current or {}).get("averageUtilization")
            shown.append(f"{_unknown(now_value, '%')}/{target.get('averageUtilization')}%")
        else:
            field = "averageValue" if target.get("type") == "AverageValue" else "value"
            shown.append(f"{_unknown((current or {}).get(field), '')}/{target.get(field)}")
    return ", ".join(shown) if shown else "<none>"


def _unknown(value: object, unit: str) -> str:
    return "<unknown>" if value is None else f"{value}{unit}"


def _min_pods(obj: JsonObject, now: datetime) -> object:
    value = _get(obj, "spec", "minReplicas")
    return int(value) if value is not None else "<unset>"


AGE = Column("Age", "string", _age)
NAME = Column("Name", "string", _name, format="name")
COLUMNS: Final[dict[str, tuple[Column, ...]]] = {
    "pods": (
        NAME,
        Column("Ready", "string", _pod_ready),
        Column("Status", "string", _pod_status),
        Column("Restarts", "string", lambda obj, now: str(_restarts(obj, now))),
        AGE,
        Column("IP", "string", lambda obj, now: _or_none(_get(obj, "status", "podIP")), priority=1),
        Column("Node", "string", lambda obj, now: _or_none(_get(obj, "spec", "nodeName")), priority=1),
        Column("Nominated Node", "string", lambda obj, now: _or_none(_get(obj, "status", "nominatedNodeName")), 1),
        Column("Readiness Gates", "string", lambda obj, now: "<none>", priority=1),
    ),
    "nodes": (
        NAME,
        Column("Status", "string", _node_status),
        Column("Roles", "string", _roles),
        AGE,
        Column("Version", "string", _node_info("kubeletVersion")),
        Column("Internal-IP", "string", _address("InternalIP"), priority=1),
        Column("External-IP", "string", _address("ExternalIP"), priority=1),
        Column("OS-Image", "string", _node_info("osImage"), priority=1),
        Column("Kernel-Version", "string", _node_info("kernelVersion"), priority=1),
        Column("Container-Runtime", "string", _node_info("containerRuntimeVersion"), priority=1),
    ),
    "deployments": (
        NAME,
        Column("Ready", "string", _ready_of_replicas),
        Column("Up-to-date", "integer", _int("status", "updatedReplicas")),
        Column("Available", "integer", _int("status", "availableReplicas")),
        AGE,
        Column("Containers", "string", _containers, priority=1),
        Column("Images", "string", _images, priority=1),
        Column("Selector", "string", _selector, priority=1),
    ),
    "statefulsets": (
        NAME,
        Column("Ready", "string", _ready_of_replicas),
        AGE,
        Column("Containers", "string", _containers, priority=1),
        Column("Images", "string", _images, priority=1),
    ),
    "replicasets": (
        NAME,
        Column("Desired", "integer", _int("spec", "replicas")),
        Column("Current", "integer", _int("status", "replicas")),
        Column("Ready", "integer", _int("status", "readyReplicas")),
        AGE,
        Column("Containers", "string", _containers, priority=1),
        Column("Images", "string", _images, priority=1),
        Column("Selector", "string", _selector, priority=1),
    ),
    "horizontalpodautoscalers": (
        NAME,
        Column("Reference", "string", _reference),
        Column("Targets", "string", _targets),
        Column("MinPods", "string", _min_pods),
        Column("MaxPods", "integer", _int("spec", "maxReplicas")),
        Column("Replicas", "integer", _int("status", "currentReplicas")),
        AGE,
    ),
    "configmaps": (NAME, Column("Data", "integer", lambda obj, now: len(obj.get("data") or {})), AGE),
    "resourceslices": (
        NAME,
        Column("Node", "string", lambda obj, now: _or_none(_get(obj, "spec", "nodeName"))),
        Column("Driver", "string", lambda obj, now: _or_none(_get(obj, "spec", "driver"))),
        Column("Pool", "string", lambda obj, now: _or_none(_get(obj, "spec", "pool", "name"))),
        AGE,
    ),
}


def table(
    resource: str, objects: Iterable[JsonObject], now: datetime, *, metadata: JsonObject, include_object: str = ""
) -> JsonObject:
    """The Table of `objects` (one row each). `include_object` is the request's includeObject: None leaves the rows'
    objects out, Object puts each whole object, anything else (the default, Metadata) its PartialObjectMetadata."""
    columns = COLUMNS.get(resource, (NAME, AGE))
    rows = []
    for obj in objects:
        row: JsonObject = {"cells": [column.cell(obj, now) for column in columns]}
        if include_object == "Object":
            row["object"] = obj
        elif include_object != "None":
            row["object"] = {
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": obj["metadata"],
            }
        rows.append(row)
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": metadata,
        "columnDefinitions": [
            {
                "name": column.name,
                "type": column.kind,
                "format": column.format,
                "description": column.name,
                "priority": column.priority,
            }
            for column in columns
        ],
        "rows": rows,
    }
