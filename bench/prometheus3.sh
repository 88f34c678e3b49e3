#!/usr/bin/env bash
# Builds Prometheus 3.16.0 from its Go module (the 3.x releases are tagged v0.3xx.y for Go: v0.316.0 is 3.16.0) and
# prints the binary's path, for `bench/fleet_prometheus.py --prometheus "$(bench/prometheus3.sh)"`. Debian's package is
# 2.42; the rules' budget is judged on the release users run
# (docs/decisions/2026-11-29-rules-on-prometheus-3.md). The version is written in with -ldflags, as the release's
# Makefile does, so the bench prints it. Built once into $GPU_PULSE_PROMETHEUS3_DIR (default
# ~/.cache/gpu-pulse/prometheus-3.16.0); the build takes minutes and fills the Go module cache.
set -euo pipefail

version=3.16.0
module=v0.316.0
dir=${GPU_PULSE_PROMETHEUS3_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/gpu-pulse/prometheus-$version}
binary=$dir/prometheus

if [[ ! -x $binary ]]; then
    command -v go >/dev/null || { echo "prometheus3.sh: go is needed to build Prometheus $version" >&2; exit 2; }
    mkdir -p "$dir"
    echo "prometheus3.sh: building Prometheus $version into $dir" >&2
    GOBIN=$dir GOFLAGS=-p=1 go install \
        -ldflags "-X github.com/prometheus/common/version.Version=$version -X github.com/prometheus/common/version.Branch=release-${version%.*}" \
        "github.com/prometheus/prometheus/cmd/prometheus@$module" >&2
fi
echo "$binary"
