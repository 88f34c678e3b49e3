"""A small Kubernetes API server for tests and the demo: it stands in for kube-apiserver, an external service.

It answers the few calls gpu-pulse makes, with real object shapes the `kubernetes` client and `kubectl` parse:
pods, nodes, ReplicaSets, Deployments, StatefulSets, HorizontalPodAutoscalers (autoscaling/v2) and ResourceSlices
(list with paging, watch with resourceVersion, bookmarks, timeouts, label and field selectors; `kubectl get`'s Tables
with kube-apiserver's columns, tables.py), the `extension-apiserver-authentication` ConfigMap, TokenReview,
SubjectAccessReview, enough discovery (`/version`, `/api`, `/apis`) for clients to start, and aggregated API groups
proxied to their server as kube-aggregator does (aggregator.py).

Everything is controllable from Python and from any thread: add, change and delete objects (each change is a watch
event with a higher resourceVersion), compact history (a watch from an older resourceVersion then gets 410 Gone), end
the open watches, map bearer tokens to users, set an authorization policy, refuse resources (RBAC), and count
requests by verb and resource.
"""

from simulation.kubeapi.aggregator import AggregatedApi
from simulation.kubeapi.objects import (
    owner_reference,
    owner_uid,
    pod_object,
    replica_set_object,
    status_object,
)
from simulation.kubeapi.reviews import AccessGrant, AuthorizationPolicy, TokenUser
from simulation.kubeapi.selectors import SelectorError, field_predicate, label_predicate
from simulation.kubeapi.server import KubeApiServer

__all__ = [
    "AccessGrant",
    "AggregatedApi",
    "AuthorizationPolicy",
    "KubeApiServer",
    "SelectorError",
    "TokenUser",
    "field_predicate",
    "label_predicate",
    "owner_reference",
    "owner_uid",
    "pod_object",
    "replica_set_object",
    "status_object",
]
