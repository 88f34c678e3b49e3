"""Demand that exists when no pod does: requests waiting at the gateway in front of a workload, read from the
gateway's own metrics endpoint and served as an External metric and as KEDA activation (docs/hpa.md)."""
