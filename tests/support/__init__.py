"""Test support shared by the test folders: loopback ports and waiting, child processes, a real Prometheus, real
exporter and adapter processes, the Kubernetes API test server on a thread, kubectl, and reference models."""
