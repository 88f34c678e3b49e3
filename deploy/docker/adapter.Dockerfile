# gpu-pulse-adapter: docker build -f deploy/docker/adapter.Dockerfile -t gpu-pulse-adapter .
# (from the repository root).
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
USER 65532:65532
EXPOSE 6443
ENTRYPOINT ["gpu-pulse-adapter"]
