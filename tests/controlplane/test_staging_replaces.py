"""go.mod's replace directives for Kubernetes' staging modules, as staging_replaces.py generates them."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.controlplane.staging_replaces import replace_block, staging_modules, staging_tag

pytestmark = pytest.mark.controlplane

# the shape of k8s.io/kubernetes's own go.mod (v1.37.2): staging modules replaced by directories, others required
KUBERNETES_GO_MOD = """module k8s.io/kubernetes

require (
\tgo.etcd.io/etcd/client/v3 v3.7.0
\tk8s.io/api v0.0.0
)

replace (
\tk8s.io/api => ./staging/src/k8s.io/api
\tk8s.io/client-go => ./staging/src/k8s.io/client-go
\tk8s.io/kube-aggregator => ./staging/src/k8s.io/kube-aggregator
)
"""


def test_only_the_staging_modules_are_replaced_with_the_releases_tag() -> None:
    modules = staging_modules(KUBERNETES_GO_MOD)
    assert modules == ["k8s.io/api", "k8s.io/client-go", "k8s.io/kube-aggregator"]
    assert replace_block(modules, staging_tag("v1.37.2")) == (
        "replace (\n"
        "\tk8s.io/api => k8s.io/api v0.37.2\n"
        "\tk8s.io/client-go => k8s.io/client-go v0.37.2\n"
        "\tk8s.io/kube-aggregator => k8s.io/kube-aggregator v0.37.2\n"
        ")\n"
    )


@given(st.integers(0, 99), st.integers(0, 99))
def test_a_release_tags_its_staging_modules_with_its_minor_and_patch(minor: int, patch: int) -> None:
    assert staging_tag(f"v1.{minor}.{patch}") == f"v0.{minor}.{patch}"


@pytest.mark.parametrize("version", ["1.37.2", "v1.37", "v1.37.2-rc.1", "v2.0.0"])
def test_anything_but_a_release_tag_is_refused(version: str) -> None:
    with pytest.raises(ValueError, match="not a Kubernetes release tag"):
        staging_tag(version)
