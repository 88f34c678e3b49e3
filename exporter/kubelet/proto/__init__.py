"""Generated code for the kubelet pod-resources v1 proto (api.proto); regenerate with generate.py, never edit."""
