"""Where the adapter's numbers come from: `direct` (the exporters' /pods documents) or `prometheus` (PromQL)."""
