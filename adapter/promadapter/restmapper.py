"""Which Kubernetes resources there are: prometheus-adapter's RESTMapper, for the resources a cluster always serves.

prometheus-adapter asks the cluster's discovery (custom-metrics-apiserver pkg/dynamicmapper, a
restmapper.NewDiscoveryRESTMapper) to normalize a group-resource a rule or a request names (`pod` -> `pods`,
`deployment` -> `deployments.apps`), to singularize a resource for a label template, and to find the kind and version
of a described object (custom-metrics-apiserver pkg/provider/interfaces.go `Normalized`, pkg/provider/helpers
`ReferenceFor`).
This mapper knows Kubernetes' built-in resources (`kubectl api-resources` of a v1.34 cluster: group, preferred version,
kind, plural and singular, scope), in discovery's priority order (the core group first), and a test may hand it its own
table. Custom resources are not in it: a label a rule maps to one is not served (docs/migration.md says so).

Matching follows apimachinery's DefaultRESTMapper.ResourcesFor (meta/restmapper.go): the resource is lowercased and
matches a plural or a singular; a group, when given, must equal the resource's; several matches resolve to the first in
priority order, as the discovery mapper's PriorityRESTMapper does.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True, order=True)
class GroupResource:
    """A Kubernetes group-resource; `resource` may be plural or singular until normalized."""

    group: str
    resource: str

    def __str__(self) -> str:
        """As schema.GroupResource.String() writes it: `pods`, `deployments.apps`."""
        return f"{self.resource}.{self.group}" if self.group else self.resource

    @classmethod
    def parse(cls, text: str) -> GroupResource:
        """schema.ParseGroupResource: `deployments.apps` -> (apps, deployments); `pods` -> ("", pods)."""
        resource, _, group = text.partition(".")
        return cls(group, resource)


NAMESPACES = GroupResource("", "namespaces")
NODES = GroupResource("", "nodes")
PERSISTENT_VOLUMES = GroupResource("", "persistentvolumes")
PODS = GroupResource("", "pods")
CLUSTER_SCOPED_RESOURCES = frozenset({NAMESPACES, NODES, PERSISTENT_VOLUMES})  # naming.NsGroupResource & co.


@dataclass(frozen=True, slots=True)
class ResourceType:
    group: str
    version: str
    kind: str
    plural: str
    singular: str
    namespaced: bool

    @property
    def group_resource(self) -> GroupResource:
        return GroupResource(self.group, self.plural)

    @property
    def api_version(self) -> str:
        """describedObject.apiVersion as helpers.ReferenceFor writes it: group + "/" + version (`/v1` for core)."""
        return f"{self.group}/{self.version}"


def _types(group: str, version: str, namespaced: bool, *kinds: tuple[str, str, str]) -> list[ResourceType]:
    return [ResourceType(group, version, kind, plural, singular, namespaced) for kind, plural, singular in kinds]


BUILT_IN: tuple[ResourceType, ...] = (
    *_types(
        "", "v1", True,
        ("Pod", "pods", "pod"), ("Service", "services", "service"), ("Endpoints", "endpoints", "endpoints"),
        ("PersistentVolumeClaim", "persistentvolumeclaims", "persistentvolumeclaim"),
        ("ConfigMap", "configmaps", "configmap"), ("Secret", "secrets", "secret"),
        ("ServiceAccount", "serviceaccounts", "serviceaccount"),
        ("ReplicationController", "replicationcontrollers", "replicationcontroller"), ("Event", "events", "event"),
        ("LimitRange", "limitranges", "limitrange"), ("ResourceQuota", "resourcequotas", "resourcequota"),
        ("PodTemplate", "podtemplates", "podtemplate"),
    ),
    *_types(
        "", "v1", False,
        ("Node", "nodes", "node"), ("Namespace", "namespaces", "namespace"),
        ("PersistentVolume", "persistentvolumes", "persistentvolume"),
        ("ComponentStatus", "componentstatuses", "componentstatus"),
    ),
    *_types(
        "apps", "v1", True,
        ("Deployment", "deployments", "deployment"), ("StatefulSet", "statefulsets", "statefulset"),
        ("DaemonSet", "daemonsets", "daemonset"), ("ReplicaSet", "replicasets", "replicaset"),
        ("ControllerRevision", "controllerrevisions", "controllerrevision"),
    ),
    *_types("batch", "v1", True, ("Job", "jobs", "job"), ("CronJob", "cronjobs", "cronjob")),
    *_types(
        "autoscaling", "v2", True,
        ("HorizontalPodAutoscaler", "horizontalpodautoscalers", "horizontalpodautoscaler"),
    ),
    *_types("policy", "v1", True, ("PodDisruptionBudget", "poddisruptionbudgets", "poddisruptionbudget")),
    *_types(
        "networking.k8s.io", "v1", True,
        ("Ingress", "ingresses", "ingress"), ("NetworkPolicy", "networkpolicies", "networkpolicy"),
    ),
    *_types("networking.k8s.io", "v1", False, ("IngressClass", "ingressclasses", "ingressclass")),
    *_types("discovery.k8s.io", "v1", True, ("EndpointSlice", "endpointslices", "endpointslice")),
    *_types("coordination.k8s.io", "v1", True, ("Lease", "leases", "lease")),
    *_types("events.k8s.io", "v1", True, ("Event", "events", "event")),
    *_types(
        "storage.k8s.io", "v1", False,
        ("StorageClass", "storageclasses", "storageclass"), ("CSIDriver", "csidrivers", "csidriver"),
        ("CSINode", "csinodes", "csinode"), ("VolumeAttachment", "volumeattachments", "volumeattachment"),
    ),
    *_types(
        "rbac.authorization.k8s.io", "v1", True,
        ("Role", "roles", "role"), ("RoleBinding", "rolebindings", "rolebinding"),
    ),
    *_types(
        "rbac.authorization.k8s.io", "v1", False,
        ("ClusterRole", "clusterroles", "clusterrole"),
        ("ClusterRoleBinding", "clusterrolebindings", "clusterrolebinding"),
    ),
    *_types("scheduling.k8s.io", "v1", False, ("PriorityClass", "priorityclasses", "priorityclass")),
    *_types("node.k8s.io", "v1", False, ("RuntimeClass", "runtimeclasses", "runtimeclass")),
    *_types(
        "certificates.k8s.io", "v1", False,
        ("CertificateSigningRequest", "certificatesigningrequests", "certificatesigningrequest"),
    ),
    *_types(
        "apiextensions.k8s.io", "v1", False,
        ("CustomResourceDefinition", "customresourcedefinitions", "customresourcedefinition"),
    ),
    *_types(
        "resource.k8s.io", "v1", True,
        ("ResourceClaim", "resourceclaims", "resourceclaim"),
        ("ResourceClaimTemplate", "resourceclaimtemplates", "resourceclaimtemplate"),
    ),
    *_types(
        "resource.k8s.io", "v1", False,
        ("ResourceSlice", "resourceslices", "resourceslice"), ("DeviceClass", "deviceclasses", "deviceclass"),
    ),
)  # fmt: skip


class RestMapper:
    """Resources by name, in priority order."""

    def __init__(self, types: Iterable[ResourceType] = BUILT_IN) -> None:
        self._types = tuple(types)
        self._found: dict[GroupResource, ResourceType | None] = {}

    def type_for(self, partial: GroupResource) -> ResourceType | None:
        """The resource a (possibly singular, possibly group-less) group-resource names; None when none does."""
        if partial in self._found:
            return self._found[partial]
        resource = partial.resource.lower()
        found = None
        if resource:
            for candidate in self._types:
                if partial.group and candidate.group != partial.group:
                    continue
                if resource in (candidate.plural, candidate.singular):
                    found = candidate
                    break
        if len(self._found) < 4096:  # labels of a fleet's series are few; a bound all the same
            self._found[partial] = found
        return found

    def resource_for(self, partial: GroupResource) -> GroupResource | None:
        """The normalized group-resource (plural, with its group): CustomMetricInfo.Normalized."""
        found = self.type_for(partial)
        return None if found is None else found.group_resource

    def singular(self, resource: str) -> str | None:
        """ResourceSingularizer: the singular of a resource named by its plural or singular, in any group."""
        found = self.type_for(GroupResource("", resource))
        return None if found is None else found.singular
