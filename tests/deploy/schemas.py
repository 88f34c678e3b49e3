"""Schemas for the objects kubernetes-validate has none for (custom resources): the fields gpu-pulse's manifests may
use, so that a typo or an unknown field fails."""

from __future__ import annotations

from typing import Any

import kubernetes_validate

# The oldest Kubernetes minor the kubelet contract covers, and the newest the installed kubernetes-validate knows.
VERSIONS = ("1.30", kubernetes_validate.utils.latest_version())

_ANY: dict[str, Any] = {}


def _closed(properties: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"type": "object", "additionalProperties": False, "properties": properties, "required": list(required)}


def _object(api_version: str, spec: dict[str, Any]) -> dict[str, Any]:
    metadata = {"type": "object", "required": ["name", "namespace"]}
    return {
        "type": "object",
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {"apiVersion": {"const": api_version}, "metadata": metadata, "spec": spec},
    }


_RELABEL = _closed({k: _ANY for k in ("sourceLabels", "separator", "targetLabel", "regex", "modulus", "replacement",
                                      "action")})  # fmt: skip
_DURATION = {"type": "string", "pattern": "^[0-9]+[smh]$"}
_SECRET_KEY = _closed({"secret": _closed({"name": {"type": "string"}, "key": {"type": "string"}}, ("name", "key"))})

# The Prometheus Operator's ServiceMonitor (monitoring.coreos.com/v1)
SERVICE_MONITOR = _object(
    "monitoring.coreos.com/v1",
    _closed(
        {
            "jobLabel": {"type": "string"},
            "selector": {"type": "object"},
            "namespaceSelector": _closed({"any": {"type": "boolean"}, "matchNames": {"type": "array"}}),
            "endpoints": {
                "type": "array",
                "minItems": 1,
                "items": _closed(
                    {
                        "port": {"type": "string"},
                        "path": {"type": "string"},
                        "scheme": {"enum": ["http", "https"]},
                        "interval": _DURATION,
                        "scrapeTimeout": _DURATION,
                        "honorLabels": {"type": "boolean"},
                        "tlsConfig": _closed({"ca": _SECRET_KEY, "serverName": {"type": "string"}}),
                        "relabelings": {"type": "array", "items": _RELABEL},
                        "metricRelabelings": {"type": "array", "items": _RELABEL},
                    }
                ),
            },
        },
        ("selector", "endpoints"),
    ),
)

_ISSUER_REF = _closed({"kind": {"enum": ["Issuer", "ClusterIssuer"]}, "name": {"type": "string"}}, ("name",))
_GO_DURATION = {"type": "string", "pattern": "^([0-9]+(h|m|s))+$"}

# cert-manager's Issuer and Certificate (cert-manager.io/v1)
CERT_MANAGER_SCHEMAS: dict[str, dict[str, Any]] = {
    "Issuer": _object(
        "cert-manager.io/v1",
        {
            "type": "object",
            "additionalProperties": False,
            "minProperties": 1,
            "maxProperties": 1,
            "properties": {
                "selfSigned": _closed({}),
                "ca": _closed({"secretName": {"type": "string"}}, ("secretName",)),
            },
        },
    ),
    "Certificate": _object(
        "cert-manager.io/v1",
        _closed(
            {
                "secretName": {"type": "string"},
                "commonName": {"type": "string", "maxLength": 64},
                "dnsNames": {"type": "array", "items": {"type": "string"}, "minItems": 1},
                "isCA": {"type": "boolean"},
                "duration": _GO_DURATION,
                "renewBefore": _GO_DURATION,
                "privateKey": _closed(
                    {
                        "algorithm": {"enum": ["RSA", "ECDSA", "Ed25519"]},
                        "size": {"type": "integer"},
                        "rotationPolicy": {"enum": ["Never", "Always"]},
                    }
                ),
                "usages": {
                    "type": "array",
                    "items": {"enum": ["server auth", "client auth", "digital signature", "key encipherment"]},
                },
                "issuerRef": _ISSUER_REF,
            },
            ("secretName", "issuerRef"),
        ),
    ),
}
