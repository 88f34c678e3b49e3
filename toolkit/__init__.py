"""What both services need, written once: settings from flags and environment, logs, backoff, listing and watching
pods, Kubernetes API clients, TLS serving and listen addresses. It imports neither `exporter` nor `adapter`."""
