#!/usr/bin/env bash
# Copies the generated rules and dashboards into the chart, which Helm can only read from inside its own directory:
#   rules/dist/<dialect>/gpu-pulse.rules.yaml -> gpu-pulse/files/rules/<dialect>.rules.yaml
#   dashboards/dist/<name>.json               -> gpu-pulse/files/dashboards/<name>.json
# Run it after `python -m rules.generate` or `python -m dashboards.generate`; tests/deploy fails while a copy differs.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
files="$here/gpu-pulse/files"
rm -rf "$files/rules" "$files/dashboards"
mkdir -p "$files/rules" "$files/dashboards"
for dir in "$repo"/rules/dist/*/; do
    dialect="$(basename "$dir")"
    cp "$dir/gpu-pulse.rules.yaml" "$files/rules/$dialect.rules.yaml"
done
cp "$repo"/dashboards/dist/*.json "$files/dashboards/"
echo "copied rules and dashboards into ${files#"$repo"/}"
