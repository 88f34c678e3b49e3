#!/usr/bin/env bash
# Installs everything the tests need (as root: the Debian packages prometheus, buildah and mmdebstrap too), then runs
# lint, the fast lane of the tests (unit and in-process: a failure shows within minutes), type checks and the slow
# lane (services in child processes, prometheus, promtool, kubectl, buildah, chromium, end to end).
# Usage: bash scripts/test.sh [extra pytest args]   (the lanes: tests/lanes.py)
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== installing gpu-pulse with its test extras"
python3 -m pip install --quiet --disable-pip-version-check -e '.[test]'

echo "== ruff"
ruff check .
ruff format --check .
# one worker per core (PYTEST_WORKERS overrides, 0 runs in this process), each test file on one worker: the e2e
# files share their stack within a worker, and the image test builds once
workers=("-n" "${PYTEST_WORKERS:-auto}" "--dist" "loadfile")
echo "== pytest, the fast lane: -m 'not slow'"
python3 -m pytest "${workers[@]}" -m "not slow" "$@"

echo "== mypy (strict: the packages pyproject.toml names, then bench/)"
mypy
mypy bench

if ! command -v promtool >/dev/null 2>&1 || ! command -v prometheus >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "== installing the Debian package prometheus (prometheus, promtool)"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null
        # the package starts a service on :9090 on some systems; the tests run their own
        (systemctl stop prometheus 2>/dev/null || service prometheus stop 2>/dev/null || true) >/dev/null 2>&1
    else
        echo "== prometheus/promtool missing and cannot install them (not root or no apt-get)"
    fi
fi

# the image test (tests/deploy/test_images.py) builds and runs the images with buildah, its base made by mmdebstrap;
# the end-to-end test runs one exporter on a node whose clock is a minute ahead, under faketime (libfaketime);
# the report's page test opens the HTML in headless Chromium (tests/report/test_page.py)
missing=""
for tool in buildah mmdebstrap faketime chromium; do
    command -v "$tool" >/dev/null 2>&1 || missing="$missing $tool"
done
if [ -n "$missing" ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "== installing the Debian packages buildah, mmdebstrap, faketime and chromium"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends buildah mmdebstrap faketime \
            chromium >/dev/null
    else
        echo "== buildah/mmdebstrap/faketime/chromium missing and cannot install them (not root or no apt-get)"
    fi
fi

# the release workflow's referee (tests/test_release_workflow.py): rhysd/actionlint at a pinned version, built from
# its Go module (through the Go module proxy) into a cache kept between runs, first on PATH for the tests
actionlint_version=v1.7.12
actionlint_dir="${XDG_CACHE_HOME:-$HOME/.cache}/gpu-pulse/actionlint-$actionlint_version"
if [ ! -x "$actionlint_dir/actionlint" ]; then
    if command -v go >/dev/null 2>&1; then
        echo "== installing actionlint $actionlint_version (go install)"
        GOBIN="$actionlint_dir" go install "github.com/rhysd/actionlint/cmd/actionlint@$actionlint_version"
    else
        echo "== go missing: cannot install actionlint (tests/test_release_workflow.py needs it)"
    fi
fi
export PATH="$actionlint_dir:$PATH"
# the control plane tests (tests/controlplane/) run against Kubernetes' own API server and controllers, built from its
# Go modules with the Go toolchain once per machine and found in its cache after; the first build takes long (README),
# so it is made only when asked: GPU_PULSE_CONTROLPLANE=build. Without a build the controlplane tests skip, saying so.
echo "== the Kubernetes control plane for the controlplane tests"
python3 -m tests.controlplane.build --if-cached

echo "== pytest, the slow lane: -m slow"
# the 30 slowest steps are listed at the end: the lane's time is that of its slowest worker, so they show where it goes
python3 -m pytest "${workers[@]}" -m slow --durations=30 "$@"
