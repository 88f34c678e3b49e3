"""The container images, built from this working tree by deploy/docker/build.sh (buildah, no daemon) and run with
`buildah run --isolation chroot --network host`: the exporter image serves /metrics on simulated GPUs, the adapter
image serves the metrics API (its demo: simulated nodes, a Kubernetes API stand-in) as its non-root user.

Needs buildah and mmdebstrap (Debian packages; scripts/test.sh installs them when run as root): without them the
module is skipped, or fails when CI is set. The mmdebstrap base is cached (build.sh, CACHE_DIR), so a second run
only rebuilds the virtual environment.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.deploy.rendering import DEPLOY, REPO
from tests.support.exporters import SERVING_LINE
from tests.support.loopback import http_get
from tests.support.processes import first_line_matching
from tests.support.tools import require_tool
from tests.support.waiting import patience, wait_for

pytestmark = [pytest.mark.image, pytest.mark.timeout(1200)]

BUILD = DEPLOY / "docker" / "build.sh"
# every MB is pulled onto every GPU node: the images must stay small (docs/performance.md has the figures)
COMPRESSED_BUDGET_BYTES = 100 * 1000 * 1000
SIZE_BUDGET_BYTES = 330 * 1000 * 1000
# no package manager, compiler, pip or pip cache, nor the build context, in a final image
LEFT_OUT = ("opt/gpu-pulse/bin/pip", "usr/bin/pip3", "usr/bin/gcc", "usr/bin/cc", "usr/bin/apt-get", "root/.cache/pip",
            "src")  # fmt: skip


@dataclass(frozen=True)
class Built:
    exporter: str
    adapter: str
    storage: tuple[str, ...]  # buildah's global options for the storage build.sh used
    seconds: float

    def buildah(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["buildah", *self.storage, *args], capture_output=True, text=True, timeout=120, check=check
        )


def _version() -> str:
    match = re.search(r'^version = "([^"]+)"$', (REPO / "pyproject.toml").read_text(encoding="utf-8"), re.MULTILINE)
    assert match
    return match.group(1)


@pytest.fixture(scope="module")
def built() -> Built:
    require_tool("buildah")
    require_tool("mmdebstrap")
    started = time.monotonic()
    result = subprocess.run(["bash", str(BUILD)], capture_output=True, text=True, timeout=1100, check=False)
    seconds = time.monotonic() - started
    assert result.returncode == 0, result.stderr[-4000:]
    names = result.stdout.split()
    version = _version()
    assert names == [f"gpu-pulse-exporter:{version}", f"gpu-pulse-adapter:{version}"], "build.sh tags <name>:<version>"
    driver = re.search(r"== buildah storage driver: (\S+)", result.stderr)
    storage = ("--storage-driver", "vfs") if driver and driver.group(1) == "vfs" else ()
    print(f"\nbuild.sh built both images in {seconds:.0f} s", file=sys.stderr)
    return Built(f"localhost/{names[0]}", f"localhost/{names[1]}", storage, seconds)


def _config(built: Built, image: str) -> dict[str, object]:
    document = json.loads(built.buildah("inspect", "--type", "image", image).stdout)
    config: dict[str, object] = document["OCIv1"]["config"]
    return config


@pytest.mark.parametrize(("role", "user"), [("exporter", "0:0"), ("adapter", "65532:65532")])
def test_images_are_labelled_and_run_as_documented(built: Built, role: str, user: str) -> None:
    config = _config(built, getattr(built, role))
    labels = config["Labels"]
    assert isinstance(labels, dict)
    assert labels["org.opencontainers.image.title"] == f"gpu-pulse-{role}"
    assert labels["org.opencontainers.image.version"] == _version()
    assert labels["org.opencontainers.image.licenses"] == "Apache-2.0"
    assert config["User"] == user, "the adapter as non-root; the exporter as root for the kubelet socket"
    assert config["Entrypoint"] == [f"gpu-pulse-{role}"]


@pytest.mark.parametrize("role", ["exporter", "adapter"])
def test_images_are_small_and_hold_no_build_tools(built: Built, role: str, tmp_path: Path) -> None:
    image = getattr(built, role)
    # what a node pulls: the gzip-compressed layers, as a registry would store them
    built.buildah("push", "--quiet", "--compression-format", "gzip", image, f"oci:{tmp_path / 'oci'}:latest")
    index = json.loads((tmp_path / "oci" / "index.json").read_text())
    digest = index["manifests"][0]["digest"].removeprefix("sha256:")
    manifest = json.loads((tmp_path / "oci" / "blobs" / "sha256" / digest).read_text())
    compressed = sum(layer["size"] for layer in manifest["layers"])
    container = built.buildah("from", "--pull=never", image).stdout.strip()
    try:
        root = Path(built.buildah("mount", container).stdout.strip())
        unpacked = int(
            subprocess.run(["du", "-sb", str(root)], capture_output=True, text=True, check=True).stdout.split()[0]
        )
        print(f"\n{image}: {compressed / 1e6:.1f} MB compressed, {unpacked / 1e6:.0f} MB unpacked", file=sys.stderr)
        assert compressed < COMPRESSED_BUDGET_BYTES, f"{image}: {compressed / 1e6:.0f} MB to pull"
        assert unpacked < SIZE_BUDGET_BYTES, f"{image}: {unpacked / 1e6:.0f} MB unpacked"
        for absent in LEFT_OUT:
            assert not (root / absent).exists(), f"{absent} left in {image}"
        assert not list((root / "var/lib/apt/lists").glob("*_InRelease")), "no package lists"
        assert not list((root / "opt/gpu-pulse").rglob(".build-ca-bundle.pem")), "the build stage's CA stays there"
        assert list((root / "opt/gpu-pulse/lib").glob("python3*/site-packages/exporter/cli.py"))
        assert list((root / "opt/gpu-pulse/lib").glob("python3*/site-packages/adapter/__pycache__/*.pyc"))
    finally:
        built.buildah("umount", container, check=False)
        built.buildah("rm", container, check=False)


@contextmanager
def running(built: Built, image: str, *command: str, user: str | None = None) -> Iterator[Path]:
    """`command` running in a container of `image` on the host's network; yields its log file."""
    container = built.buildah("from", "--pull=never", image).stdout.strip()
    log = Path(built.buildah("mount", container).stdout.strip()) / "tmp" / "test-run.log"  # its /tmp, seen from here
    argv = ["buildah", *built.storage, "run", "--isolation", "chroot", "--network", "host"]
    argv += ["--user", user] if user else []
    with open(log, "wb") as out:
        process = subprocess.Popen([*argv, container, "--", *command], stdout=out, stderr=subprocess.STDOUT,
                                   start_new_session=True)  # fmt: skip
    try:
        yield log
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=15)
        built.buildah("umount", container, check=False)
        built.buildah("rm", container, check=False)


def _served_url(log: Path) -> str:
    """The address a service in a container bound on port 0, from its "serving ... on URL" line."""
    found = first_line_matching(log, SERVING_LINE)
    if found is None:
        raise ValueError("not serving yet")  # wait_for: not yet
    return found.group(1)


def test_exporter_image_serves_metrics_on_simulated_gpus(built: Built) -> None:
    command = ("gpu-pulse-exporter", "--simulate", "h100x8", "--listen", "127.0.0.1:0")
    with running(built, built.exporter, *command) as log:
        try:
            wait_for(lambda: bool(_served_url(log)), "the exporter's serving line", timeout=patience(60))
            url = _served_url(log)
            wait_for(lambda: b"DCGM_FI_DEV_GPU_UTIL" in http_get(f"{url}/metrics"), "GPU series", patience(60))
        except AssertionError:
            raise AssertionError(log.read_text(errors="replace")[-3000:]) from None
        text = http_get(f"{url}/metrics").decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    gpus = {s.labels["gpu"] for s in families["DCGM_FI_DEV_GPU_UTIL"].samples}
    assert gpus == {str(i) for i in range(8)}, "the dcgm dialect by default, eight simulated H100s"


def test_adapter_image_serves_the_metrics_api_as_non_root(built: Built, tmp_path: Path) -> None:
    kubeconfig = "/tmp/demo.kubeconfig"
    command = ("gpu-pulse-adapter", "--demo", "--listen", "127.0.0.1:0", "--demo-kubeconfig", kubeconfig)
    with running(built, built.adapter, *command, user="65532:65532") as log:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE  # /healthz only; the metrics API is checked below with the CA

        def healthy() -> bool:  # the demo says "adapter serving ... on URL" once its adapter is ready
            with urllib.request.urlopen(f"{_served_url(log)}/healthz", timeout=2, context=context) as answer:
                return bool(answer.read() == b"ok")

        try:
            wait_for(healthy, "the adapter's /healthz", timeout=patience(90))
            written = log.parent / kubeconfig.removeprefix("/tmp/")
            wait_for(written.is_file, "the demo's kubeconfig", timeout=patience(30))
        except AssertionError:
            raise AssertionError(log.read_text(errors="replace")[-3000:]) from None
        kubectl = require_tool("kubectl")
        path = "/apis/custom.metrics.k8s.io/v1beta2/namespaces/demo/pods/*/gpu_utilization"
        path += "?labelSelector=app%3Dllm-inference"
        answers: list[subprocess.CompletedProcess[str]] = []

        def all_four_pods() -> bool:  # a pod whose figure is not yet (on a busy machine: no longer) fresh is left out
            answers.append(subprocess.run(
                [kubectl, "--kubeconfig", str(written), "get", "--raw", path],
                capture_output=True, text=True, timeout=30, check=False,
            ))  # fmt: skip
            return answers[-1].returncode == 0 and len(json.loads(answers[-1].stdout)["items"]) == 4

        with contextlib.suppress(AssertionError):  # the last answer is judged below
            wait_for(all_four_pods, "the four llm-inference pods in the answer", timeout=patience(30), period=1.0)
    answer = answers[-1]
    assert answer.returncode == 0, answer.stderr
    items = json.loads(answer.stdout)["items"]
    assert len(items) == 4 and all(item["metric"]["name"] == "gpu_utilization" for item in items)
