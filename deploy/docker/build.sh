#!/usr/bin/env bash
# Builds the two gpu-pulse images with buildah, without a container daemon:
#   gpu-pulse-exporter:<version> and gpu-pulse-adapter:<version>   (<version>: pyproject.toml's)
# from the working tree (tracked and untracked files that git does not ignore; the whole directory without git).
#
# The base is a Debian with python3 and its venv module. BASE=auto (the default) pulls BASE_IMAGE_REF and, when no
# registry answers, makes the base with mmdebstrap from a Debian mirror instead; BASE=pull or BASE=mmdebstrap forces
# one way. The mmdebstrap tarball is cached under CACHE_DIR, keyed by everything that goes into it; delete it (or set
# REFRESH_BASE=1) to pick up Debian's newer packages.
#
# Usage: deploy/docker/build.sh            (as root, or where rootless buildah works)
# Environment:
#   IMAGE_PREFIX     prepended to the image names, e.g. registry.example.com/team/ (default: none)
#   BASE             auto | pull | mmdebstrap (default: auto)
#   BASE_IMAGE_REF   the image to pull (default: docker.io/library/python:3.11-slim-bookworm)
#   DEBIAN_SUITE     (default: bookworm)   DEBIAN_MIRROR (default: http://deb.debian.org/debian)
#   CACHE_DIR        (default: ${XDG_CACHE_HOME:-$HOME/.cache}/gpu-pulse)
#   STORAGE_DRIVER   buildah's storage driver (default: overlay when it works here, else vfs)
#   ISOLATION        buildah's isolation for RUN (default: chroot, which needs no user namespaces or runc)
#   SOURCE_URL       the org.opencontainers.image.source label (default: the git remote "origin", if any)
#   BUILD_CA_BUNDLE  CA certificates pip trusts in the build stage, for networks that inspect TLS (default: pip's
#                    own configuration on this machine, PIP_CERT or `pip config get global.cert`, if any); it stays
#                    in the build stage, never in an image
# Prints the built image names, one a line, on stdout; progress goes to stderr.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
log() { echo "== $*" >&2; }
die() { echo "build.sh: $*" >&2; exit 1; }

command -v buildah >/dev/null 2>&1 || die "buildah is not installed (Debian: apt-get install buildah mmdebstrap)"

version="$(sed -n 's/^version = "\(.*\)"$/\1/p' "$repo/pyproject.toml" | head -n 1)"
[ -n "$version" ] || die "no version = \"...\" in $repo/pyproject.toml"
prefix="${IMAGE_PREFIX:-}"
base_mode="${BASE:-auto}"
pull_ref="${BASE_IMAGE_REF:-docker.io/library/python:3.11-slim-bookworm}"
suite="${DEBIAN_SUITE:-bookworm}"
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
cache="${CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/gpu-pulse}"
isolation="${ISOLATION:-chroot}"

# buildah's global options: the storage driver, overlay when this machine can mount it, else vfs (slower, no kernel
# support needed)
storage=()
if [ -n "${STORAGE_DRIVER:-}" ]; then
    storage=(--storage-driver "$STORAGE_DRIVER")
else
    probe="$(buildah from scratch 2>/dev/null || true)"
    if [ -z "$probe" ] || ! buildah mount "$probe" >/dev/null 2>&1; then
        storage=(--storage-driver vfs)
    fi
    [ -n "$probe" ] && { buildah umount "$probe" >/dev/null 2>&1 || true; buildah rm "$probe" >/dev/null 2>&1 || true; }
fi
bh() { buildah "${storage[@]}" "$@"; }
log "buildah storage driver: ${STORAGE_DRIVER:-$( [ ${#storage[@]} -gt 0 ] && echo vfs || buildah info --format '{{.store.GraphDriverName}}' 2>/dev/null || echo default)}"

# The base made with mmdebstrap: Debian's Essential set plus python3, its venv module, CA certificates and the C++
# runtime (grpcio's extension links libstdc++), without documentation, manual pages and translations (copyright
# files stay).
# shellcheck disable=SC2054 # the commas separate the packages of --include, not array elements
mmdebstrap_args=(
    --variant=essential
    --include=python3,python3-venv,ca-certificates,libstdc++6
    --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr
    --dpkgopt='path-exclude=/usr/share/doc/*'
    --dpkgopt='path-include=/usr/share/doc/*/copyright'
    --dpkgopt='path-exclude=/usr/share/man/*'
    --dpkgopt='path-exclude=/usr/share/info/*'
    --dpkgopt='path-exclude=/usr/share/locale/*'
    --dpkgopt='path-exclude=/usr/share/lintian/*'
)

mmdebstrap_base() {
    command -v mmdebstrap >/dev/null 2>&1 || die "no base image could be pulled and mmdebstrap is not installed"
    local key tarball image
    key="$(printf '%s\n' "$(mmdebstrap --version)" "$suite" "$mirror" "${mmdebstrap_args[@]}" | sha256sum | cut -c1-16)"
    image="localhost/gpu-pulse-base:$suite-$key"
    tarball="$cache/base-$suite-$key.tar"
    if [ "${REFRESH_BASE:-0}" = 1 ]; then
        rm -f "$tarball"
        bh rmi "$image" >/dev/null 2>&1 || true
    fi
    if bh inspect --type image "$image" >/dev/null 2>&1; then
        log "base: $image (already in buildah's storage)"
        echo "$image"
        return
    fi
    if [ ! -f "$tarball" ]; then
        log "base: mmdebstrap $suite from $mirror into $tarball"
        mkdir -p "$cache"
        local mode=root
        [ "$(id -u)" = 0 ] || mode=unshare
        # the output format follows the file name: keep the .tar suffix on the partial file
        mmdebstrap --quiet --mode="$mode" "${mmdebstrap_args[@]}" "$suite" "${tarball%.tar}.part.tar" "$mirror" >&2
        mv "${tarball%.tar}.part.tar" "$tarball"
    else
        log "base: cached $tarball"
    fi
    local container
    container="$(bh from scratch)"
    bh add --quiet "$container" "$tarball" / >/dev/null
    bh config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        --cmd /bin/bash --label "org.opencontainers.image.base.name=debian:$suite (mmdebstrap)" "$container"
    bh commit --quiet --rm "$container" "$image" >/dev/null
    log "base: imported as $image"
    echo "$image"
}

case "$base_mode" in
    pull | auto)
        if bh pull --quiet "$pull_ref" >/dev/null 2>&1; then
            base="$pull_ref"
            log "base: pulled $pull_ref"
        elif [ "$base_mode" = pull ]; then
            die "cannot pull $pull_ref"
        else
            log "base: cannot pull $pull_ref; making one with mmdebstrap"
            base="$(mmdebstrap_base)"
        fi
        ;;
    mmdebstrap) base="$(mmdebstrap_base)" ;;
    *) die "BASE must be auto, pull or mmdebstrap, not $base_mode" ;;
esac

# The build context: the working tree as git sees it (tracked, and untracked but not ignored), so that local venvs,
# caches and build directories stay out; the whole directory where there is no git.
context="$(mktemp -d)"
trap 'rm -rf "$context"' EXIT
if git -C "$repo" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    (cd "$repo" && git ls-files -z --cached --others --exclude-standard | xargs -0 -r ls -d 2>/dev/null | tar -cf - -T -) \
        | tar -xf - -C "$context"
else
    cp -a "$repo/." "$context/"
fi

ca_bundle="${BUILD_CA_BUNDLE:-${PIP_CERT:-$(python3 -m pip config get global.cert 2>/dev/null || true)}}"
if [ -n "$ca_bundle" ]; then
    [ -f "$ca_bundle" ] || die "BUILD_CA_BUNDLE $ca_bundle is not a file"
    cp "$ca_bundle" "$context/.build-ca-bundle.pem"
    log "pip in the build stage trusts $ca_bundle"
fi

# OCI labels that change with every commit, set after the build on the tagged image (a LABEL in the Containerfile
# would sit in a cached layer and keep the values of the build that first made it): where the source is, the commit
# built (-dirty: with changes not committed) and when.
source_url="${SOURCE_URL:-$(git -C "$repo" remote get-url origin 2>/dev/null || true)}"
revision="$(git -C "$repo" rev-parse HEAD 2>/dev/null || true)"
if [ -n "$revision" ] && [ -n "$(git -C "$repo" status --porcelain 2>/dev/null)" ]; then
    revision="$revision-dirty"
fi
created="$(date -u ${SOURCE_DATE_EPOCH:+-d "@$SOURCE_DATE_EPOCH"} +%Y-%m-%dT%H:%M:%SZ)"
oci_labels=(--label "org.opencontainers.image.created=$created")
[ -n "$source_url" ] && oci_labels+=(--label "org.opencontainers.image.source=$source_url")
[ -n "$revision" ] && oci_labels+=(--label "org.opencontainers.image.revision=$revision")

# The build stage first, under a name of its own: the two images reuse its layers (--layers), and the next build
# replaces it instead of leaving it behind untagged.
for target in build exporter adapter; do
    name="${prefix}gpu-pulse-$target:$version"
    [ "$target" = build ] && name="localhost/gpu-pulse-build-stage:$version"
    previous="$(bh inspect --type image --format '{{.FromImageID}}' "$name" 2>/dev/null || true)"
    log "building $name (base $base)"
    bh bud --quiet --layers --force-rm --isolation "$isolation" --network host --pull=missing \
        --file "$here/Containerfile" --target "$target" \
        --build-arg "BASE_IMAGE=$base" --build-arg "VERSION=$version" \
        --tag "$name" "$context" >/dev/null
    if [ "$target" != build ]; then
        labelled="$(bh from --quiet --pull-never "$name")"
        bh config "${oci_labels[@]}" "$labelled"
        bh commit --quiet --rm "$labelled" "$name" >/dev/null
    fi
    # the image this tag named before, now untagged: removed unless something still uses it
    if [ -n "$previous" ] && [ "$previous" != "$(bh inspect --type image --format '{{.FromImageID}}' "$name")" ]; then
        bh rmi "$previous" >/dev/null 2>&1 || true
    fi
    [ "$target" = build ] || echo "$name"
done
