"""The aggregated API: custom.metrics.k8s.io, external.metrics.k8s.io, discovery, OpenAPI, health, self-metrics.

Kept import-light on purpose: `adapter.kube` imports `adapter.status` and nothing else from here.
"""
