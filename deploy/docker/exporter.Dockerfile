# gpu-pulse-exporter: docker build -f deploy/docker/exporter.Dockerfile -t gpu-pulse-exporter .
# (from the repository root). libnvidia-ml is not in the image: the NVIDIA container runtime injects the node's.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/gpu-pulse
WORKDIR /src
COPY pyproject.toml README.md ./
COPY exporter ./exporter
COPY adapter ./adapter
RUN /opt/gpu-pulse/bin/pip install . \
    && /opt/gpu-pulse/bin/python -m compileall -q /opt/gpu-pulse

FROM ${PYTHON_IMAGE}
COPY --from=build /opt/gpu-pulse /opt/gpu-pulse
ENV PATH=/opt/gpu-pulse/bin:$PATH PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
# Non-root by default. The DaemonSet runs it as root only to reach the kubelet's pod-resources socket
# (deploy/base/exporter/daemonset.yaml says why); without that socket it runs as this user.
USER 65532:65532
EXPOSE 9400
ENTRYPOINT ["gpu-pulse-exporter"]
