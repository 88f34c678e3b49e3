"""The adapter's pod cache: every pod of the cluster, kept by list and watch, indexed for the metrics API."""
