"""gpu-pulse-report: GPU waste and right-sizing over a window of Prometheus history (HTML and JSON)."""
