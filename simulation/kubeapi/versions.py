"""Which versions of `resource.k8s.io` a Kubernetes release serves, and a ResourceSlice as each of them writes it.

Dynamic Resource Allocation by release (kubernetes/api `resource/v1beta1`, `resource/v1beta2`, `resource/v1`, and the
Kubernetes 1.32, 1.33 and 1.34 release notes): beta in 1.32 with `resource.k8s.io/v1beta1`, `v1beta2` added in 1.33,
GA in 1.34 with `resource.k8s.io/v1`. Before 1.34 the beta API is off unless the cluster enables it (beta APIs are
off by default since 1.24, KEP-3136), so a cluster that runs DRA at all serves at least the versions below. The
stand-in stores ResourceSlices as v1 objects and writes them out in the version a request names.

v1beta1 nests a device's attributes and capacity under `basic` (`Device.Basic`, a `BasicDevice`); v1beta2 and v1 put
them on the device itself.
"""

from __future__ import annotations

import copy
from typing import Final

from simulation.kubeapi.objects import JsonObject

GROUP: Final = "resource.k8s.io"
SINCE: Final = {"v1beta1": 32, "v1beta2": 33, "v1": 34}  # the Kubernetes minor release that added the version
_BASIC_FIELDS: Final = ("attributes", "capacity")


def served_versions(kubernetes_minor: int) -> tuple[str, ...]:
    """The `resource.k8s.io` versions a cluster of Kubernetes 1.<minor> running DRA serves, newest first."""
    newest_first = sorted(SINCE.items(), key=lambda item: -item[1])
    return tuple(version for version, since in newest_first if since <= kubernetes_minor)


def resource_slice_as(obj: JsonObject, version: str) -> JsonObject:
    """A stored (v1) ResourceSlice as `resource.k8s.io/<version>` writes it."""
    if version not in SINCE:
        raise ValueError(f"resource.k8s.io has no version {version!r} (known: {', '.join(SINCE)})")
    out = copy.deepcopy(obj)
    out["apiVersion"] = f"{GROUP}/{version}"
    if version == "v1beta1":
        devices = out.get("spec", {}).get("devices") or []
        for n, device in enumerate(devices):
            basic = {field: device.pop(field) for field in _BASIC_FIELDS if field in device}
            devices[n] = {**device, "basic": basic}
    return out
